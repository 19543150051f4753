#!/usr/bin/env bash
# The edge knows each route's failure mode without the agent (routes.map's
# fail=open|closed word). Beside t_failures.sh (agent stopped, frozen): an agent
# address that accepts every connection and closes it at once (asked twice:
# whether or not the health check has marked it DOWN by then). An open route
# (GET /accounts/, the default "*") passes with no RateLimit headers, logged
# rl=- reason=no-decision-fail-open; a closed one (POST /transfers) answers 503. Then an agent that answers
# status=error: an answer, so 503 on open routes too (docs/integrate.md).
# Both instances.
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
		eq "$what, $inst: the default line (open) passes to the demo's 404" 404 "$RSP_STATUS"
		req $inst POST /transfers "$tok"
		eq "$what, $inst: fail-closed transfer 503" 503 "$RSP_STATUS"
		eq "$what, $inst: 503 is the problem document" application/problem+json "$(rsp_hdr Content-Type)"
		req $inst GET /accounts/ACC-FO "not.a.token"
		eq "$what, $inst: a bad token is still 401" 401 "$RSP_STATUS"
	done
}
# logged WHAT: A's log since line $mark holds an open pass of the read.
logged() {
	check "$1: A logs the pass (rl=- reason=no-decision-fail-open)" \
		grep -q 'GET /accounts/ACC-FO.*policy=reads rl=- .*reason=no-decision-fail-open' <(tail -n +"$mark" "$T/haproxy-A.log")
}

req A GET /accounts/ACC-FO "$tok"
eq "baseline: the read carries its decision" 100 "$(rsp_hdr RateLimit-Limit)"

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
probe "agent closing connections"; logged "agent closing connections"
probe "agent closing connections, again"   # (the health check may have marked it DOWN meanwhile)
kill "$REFUSER"; wait_gone "$REFUSER"

# An agent that answers status=error for every decision.
python3 "$ROOT/tests/e2e/fake_agent.py" --listen "127.0.0.1:$AGENT_PORT" --error agent-refused \
	--policy transfer=3/1 --policy reads=100/60 --policy anon=60/60 >>"$T/fake.log" 2>&1 &
FAKE=$!
t_track "$FAKE"
wait_port "$AGENT_PORT"
until_up() {   # instance $1's health check sees the fake agent: its answer comes back
	for _ in $(seq 120); do
		req "$1" POST /transfers "$tok"
		[ "$RSP_STATUS" = 503 ] && grep -q agent-refused "$T/rsp.body" && return 0
		sleep 0.25
	done
	return 1
}
check "A asks the fake agent" until_up A
check "B asks the fake agent" until_up B
for inst in A B; do
	req $inst GET /accounts/ACC-FO "$tok"
	eq "agent answers status=error, $inst: an answer, so 503 on an open route too" 503 "$RSP_STATUS"
	req $inst POST /transfers "$tok"
	eq "agent answers status=error, $inst: 503 on a closed route" 503 "$RSP_STATUS"
done
kill "$FAKE"; wait_gone "$FAKE"
t_done
