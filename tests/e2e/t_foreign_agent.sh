#!/usr/bin/env bash
# The HAProxy side depends on the contract (docs/configuration.md, "HAProxy
# side"), not on our agent:
# the same haproxy.cfg and SPOE file, unchanged, in front of fake_agent.py -
# an independent SPOP agent written from the contract alone (in-memory
# window, no Redis) - still gives the story, the 401s, and 503 on errors.
. "$(dirname "$0")/../lib.sh"
AGENT="$ROOT/tests/e2e/fake_agent.py"
t_setup
jwt_setup
start_agent "$(edge_policies)"
start_backend
start_haproxy A
start_haproxy B

req_seq POST "$(mint_token ACC-1001)" A /transfers B /transfers A /transfers B /transfers A /transfers B /transfers
eq "foreign agent: 6 transfers alternating A/B" "201 201 201 429 429 429" "$(cut -d' ' -f1 "$T/seq.out" | xargs)"
eq "foreign agent: RateLimit-Remaining on #3" 0 "$(seq_hdr 3 RateLimit-Remaining)"
check "foreign agent: Retry-After on #4" test -n "$(seq_hdr 4 Retry-After)"

req A POST /transfers "$("$ROOT/tools/jwt.sh" mint --alg none --sub ACC-1001)"
eq "foreign agent: alg none is 401" 401 "$RSP_STATUS"

req B GET /accounts/ACC-2 "$(mint_token ACC-2)"
eq "foreign agent: read route" 200 "$RSP_STATUS"
eq "foreign agent: read route headers" '"reads";q=100;w=60' "$(rsp_hdr RateLimit-Policy)"

# An agent that answers status=error (as ours does when Redis is down).
stop_agent
AGENT_FLAGS=(--error redis-unavailable)
"$AGENT" -f "$T/agent.conf" "${AGENT_FLAGS[@]}" >>"$T/agent.log" 2>&1 &
AGENT_PID=$!; t_track "$AGENT_PID"
wait_port "$AGENT_PORT"
for _ in $(seq 120); do
	req A POST /transfers "$(mint_token ACC-3)"
	grep -q redis-unavailable "$T/rsp.body" 2>/dev/null && break
	sleep 0.25
done
eq "foreign agent: status=error becomes 503" 503 "$RSP_STATUS"
check "foreign agent: the reason reaches the problem body" grep -q '"reason":"redis-unavailable"' "$T/rsp.body"

stop_agent
req B POST /transfers "$(mint_token ACC-3)"
eq "foreign agent: agent gone becomes 503" 503 "$RSP_STATUS"
t_done
