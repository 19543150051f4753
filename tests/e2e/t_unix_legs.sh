#!/usr/bin/env bash
# The story over unix sockets on both legs, the single-host layout
# docs/deployment.md recommends: HAProxy reaches the agent at
# "server ... unix@/path" (RL_AGENT_ADDR), the agent listens on
# "listen unix:/path" and reaches Redis at "redis unix:///path". No TCP
# port of the agent or of Redis is open. ACC-2001 sends 4 transfers through
# two edges: 3 x 201 counting down one shared window, then a 429; the
# window is in Redis (reached over its socket); with Redis stopped a
# transfer gets 503, never a free pass.
. "$(dirname "$0")/../lib.sh"
t_setup
jwt_setup || exit 1
# Redis on a unix socket only (port 0: no TCP listener)
redis-server --port 0 --unixsocket "$T/redis.sock" --unixsocketperm 700 --save '' --appendonly no \
	--dir "$T" --logfile "$T/redis.log" --daemonize no &
REDIS_PID=$!
t_track "$REDIS_PID"
for _ in $(seq 200); do redis-cli -s "$T/redis.sock" PING >/dev/null 2>&1 && break; sleep 0.05; done
eq "redis answers on its unix socket" PONG "$(redis-cli -s "$T/redis.sock" PING)"
rcli() { redis-cli -s "$T/redis.sock" "$@"; }

{
	echo "listen unix:$T/agent.sock"
	echo "redis unix://$T/redis.sock"
	echo "$E2E_REDIS_TIMEOUT"
	edge_policies
} >"$T/agent.conf"
"$AGENT" -c -f "$T/agent.conf" >"$T/agent-check.log" 2>&1
eq "agent -c accepts unix: on both legs ($(cat "$T/agent-check.log"))" 0 "$?"
"$AGENT" -f "$T/agent.conf" >>"$T/agent.log" 2>&1 &
AGENT_PID=$!
t_track "$AGENT_PID"
for _ in $(seq 200); do [ -S "$T/agent.sock" ] && break; sleep 0.05; done
check "the agent's socket exists" test -S "$T/agent.sock"

start_backend || exit 1
export E2E_AGENT_ADDR=unix@$T/agent.sock
start_haproxy A || exit 1
start_haproxy B || exit 1
check "the edge points at the agent's socket" grep -q "RL_AGENT_ADDR=unix@$T/agent.sock" "$T/haproxy-A.env"

tok=$(mint_token ACC-2001)
req_seq POST "$tok" A /transfers B /transfers A /transfers B /transfers
statuses=
for i in 1 2 3 4; do statuses="$statuses $(seq_status $i)"; done
eq "4 transfers alternating A/B over unix sockets" " 201 201 201 429" "$statuses"
eq "#1 RateLimit-Policy" '"transfer";q=3;w=1' "$(seq_hdr 1 RateLimit-Policy)"
eq "#3 RateLimit-Remaining counts down over both edges" 0 "$(seq_hdr 3 RateLimit-Remaining)"
check "#4 has Retry-After" grep -Eqx '[1-9][0-9]*' <<<"$(seq_hdr 4 Retry-After)"
check "the account's window is in Redis (over its socket)" test -n "$(rcli --scan --pattern '*ACC-2001*' | head -1)"

kill -TERM "$REDIS_PID"
wait_gone "$REDIS_PID"
# another account: ACC-2001's denial is in the agent's deny cache
req A POST /transfers "$(mint_token ACC-2002)"
eq "Redis down: 503 (fail-closed), over the unix legs too" 503 "$RSP_STATUS"
t_done
