#!/usr/bin/env bash
# The edge knows each route's failure mode without the agent: with the agent
# stopped (connection refused), frozen (SIGSTOP: "timeout processing"),
# refusing (a listener that closes every connection) or answering
# status=error, a fail=open route (GET /accounts/, the default "*") passes
# with no RateLimit headers and reason=no-decision-fail-open in the log, and
# a fail-closed one (POST /transfers) answers 503. Both instances.
. "$(dirname "$0")/../lib.sh"
t_setup
export RL_SPOE_TIMEOUT=1s
start_edge A B
tok=$(mint_token ACC-FO)

# probe WHAT: the two routes on both instances, without a decision.
probe() {
	local what=$1 inst
	for inst in A B; do
		req $inst GET /accounts/ACC-FO "$tok"
		eq "$what, $inst: fail=open read 200" 200 "$RSP_STATUS"
		eq "$what, $inst: fail=open read: no RateLimit-Limit" "" "$(rsp_hdr RateLimit-Limit)"
		eq "$what, $inst: fail=open read: no RateLimit-Policy" "" "$(rsp_hdr RateLimit-Policy)"
		eq "$what, $inst: fail=open read: X-Account still the verified sub" ACC-FO "$(jq -r .account "$T/rsp.body")"
		req $inst GET /unlisted "" 
		eq "$what, $inst: the default line (fail=open) passes to the demo's 404" 404 "$RSP_STATUS"
		req $inst POST /transfers "$tok"
		eq "$what, $inst: fail-closed transfer 503" 503 "$RSP_STATUS"
		eq "$what, $inst: 503 is the problem document" application/problem+json "$(rsp_hdr Content-Type)"
		req $inst GET /accounts/ACC-FO "not.a.token"
		eq "$what, $inst: a bad token is still 401" 401 "$RSP_STATUS"
	done
}
# logged WHAT: the fail-open passes since the mark are in A's log.
logged() {
	check "$1: A logs reason=no-decision-fail-open" \
		grep -q 'GET /accounts/ACC-FO.*policy=reads .*reason=no-decision-fail-open' <(tail -n +"$mark" "$T/haproxy-A.log")
}

req A GET /accounts/ACC-FO "$tok"
eq "baseline: the read carries its decision" 100 "$(rsp_hdr RateLimit-Limit)"

mark=$(($(wc -l < "$T/haproxy-A.log") + 1))
stop_agent
probe "agent stopped"; logged "agent stopped"

start_agent "$E2E_REDIS_TIMEOUT
$(edge_policies)"
mark=$(($(wc -l < "$T/haproxy-A.log") + 1))
kill -STOP "$AGENT_PID"
probe "agent frozen"; logged "agent frozen"
kill -CONT "$AGENT_PID"
stop_agent

# Refusing: whatever connects is closed at once.
python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(64)
while True:
    c, _ = s.accept(); c.close()
' "$AGENT_PORT" &
REFUSER=$!
t_track "$REFUSER"
wait_port "$AGENT_PORT"
mark=$(($(wc -l < "$T/haproxy-A.log") + 1))
probe "agent refusing"; logged "agent refusing"
kill "$REFUSER"; wait_gone "$REFUSER"

# An agent that answers status=error for every decision.
python3 "$ROOT/tests/e2e/fake_agent.py" --listen "127.0.0.1:$AGENT_PORT" --error agent-refused \
	--policy transfer=3/1 --policy reads=100/60 --policy anonymous=60/60 >>"$T/fake.log" 2>&1 &
FAKE=$!
t_track "$FAKE"
wait_port "$AGENT_PORT"
mark=$(($(wc -l < "$T/haproxy-A.log") + 1))
probe "agent answers status=error"; logged "agent answers status=error"
kill "$FAKE"; wait_gone "$FAKE"
t_done
