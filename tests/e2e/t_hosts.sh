#!/usr/bin/env bash
# docs/deployment.md, "Several HAProxy hosts, one Redis": two "hosts", each
# an HAProxy with its own agent (its server line names only that agent), one
# Redis. The section's checks: each agent's config passes -c with the routes,
# both configs are the same but for listen/metrics, each agent's /readyz says
# ready, one account's requests sent to each host in turn count in one window
# (201 with RateLimit-Remaining 2, 1, 0 across both, then 429 on either), and
# ctl show on the config of either host reads the same used.
. "$(dirname "$0")/../lib.sh"
t_setup
jwt_setup
start_redis
# The policies of haproxy/routes.map, transfer on a minute (no race with the
# window in this test).
policies=$(edge_policies | sed 's|^policy transfer .*|policy transfer 3/1m|')
start_backend
for h in a b; do
	AGENT_PORT=$(free_port) METRICS_PORT=$(free_port)
	start_agent "$E2E_REDIS_TIMEOUT
metrics 127.0.0.1:$METRICS_PORT
$policies" || { fail "agent $h started"; t_done; exit 1; }
	cp "$T/agent.conf" "$T/agent-$h.conf"
	printf -v "AGENT_PID_$h" '%s' "$AGENT_PID"
	printf -v "METRICS_$h" '%s' "$METRICS_PORT"
	out=$("$AGENT" -c -f "$T/agent-$h.conf" --routes "$HAPROXY_FILES/routes.map" 2>&1)
	eq "host $h: ratelimit-spoa -c --routes passes ($out)" 0 $?
	start_haproxy "${h^^}" || { fail "haproxy $h started"; t_done; exit 1; }
	eq "host $h: its HAProxy's agent server is its own agent" "127.0.0.1:$AGENT_PORT" \
		"$(sed -n 's/^export RL_AGENT_ADDR=//p' "$T/haproxy-${h^^}.env")"
	unset AGENT_PORT
done
eq "the two configs differ only in listen and metrics" "" \
	"$(diff <(grep -v '^listen\|^metrics' "$T/agent-a.conf") <(grep -v '^listen\|^metrics' "$T/agent-b.conf"))"
for h in a b; do
	p="METRICS_$h"
	for _ in $(seq 50); do [ "$(curl -s "http://127.0.0.1:${!p}/readyz")" = ready ] && break; sleep 0.1; done
	eq "host $h: /readyz says ready" ready "$(curl -s "http://127.0.0.1:${!p}/readyz")"
done

tok=$(mint_token ACC-HOSTS)
req_seq POST "$tok" A /transfers B /transfers A /transfers B /transfers A /transfers
for i in 1 2 3; do
	eq "#$i (host $( [ $((i % 2)) = 1 ] && echo a || echo b)): 201" 201 "$(seq_status $i)"
	eq "#$i: RateLimit-Remaining counts down across both hosts" $((3 - i)) "$(seq_hdr $i RateLimit-Remaining)"
done
eq "#4 (host b): 429, the shared window is full" 429 "$(seq_status 4)"
eq "#5 (host a): 429" 429 "$(seq_status 5)"
for h in a b; do
	used=$("$AGENT" ctl -c "$T/agent-$h.conf" show transfer jwt:ACC-HOSTS --json | jq -r '.windows[0].used')
	eq "ctl show with host $h's config: used 3" 3 "$used"
done
# Both agents decided: each host's HAProxy logged an allow from its own agent.
for h in A B; do
	check "host $h: its agent decided (rl=allow in its log)" grep -q 'key=jwt:ACC-HOSTS .*rl=allow' "$T/haproxy-$h.log"
done
t_done
