#!/usr/bin/env bash
# The lean answer (issue 41): an edge started with RL_IETF_ONLY sends only
# the IETF RateLimit-Policy / RateLimit fields and asks the agent (the SPOE
# message's "vars" argument) for only what it then reads; an edge without
# it keeps the full answer. Both share one window: ACC-4001's transfers go
# A (full), B (lean), A, then B is denied. B's answers carry RateLimit-Policy
# and RateLimit but none of the trio; its 429 keeps Retry-After and the
# problem body's violated policy; A's answers keep all five headers.
. "$(dirname "$0")/../lib.sh"
t_setup
jwt_setup || exit 1
start_redis || exit 1
start_agent "$E2E_REDIS_TIMEOUT
$(edge_policies)" || exit 1
start_backend || exit 1
start_haproxy A || exit 1
RL_IETF_ONLY=1 start_haproxy B || exit 1

tok=$(mint_token ACC-4001)
req_seq POST "$tok" A /transfers B /transfers A /transfers B /transfers
statuses=
for i in 1 2 3 4; do statuses="$statuses $(seq_status $i)"; done
eq "A, B, A, B over one window" " 201 201 201 429" "$statuses"
for i in 1 3; do
	eq "#$i (full) RateLimit-Limit" 3 "$(seq_hdr $i RateLimit-Limit)"
	check "#$i (full) RateLimit-Remaining and -Reset" test -n "$(seq_hdr $i RateLimit-Remaining)" -a -n "$(seq_hdr $i RateLimit-Reset)"
	eq "#$i (full) RateLimit-Policy" '"transfer";q=3;w=1' "$(seq_hdr $i RateLimit-Policy)"
done
for i in 2 4; do
	eq "#$i (lean) RateLimit-Policy" '"transfer";q=3;w=1' "$(seq_hdr $i RateLimit-Policy)"
	check "#$i (lean) RateLimit" grep -q '^"transfer";r=' <<<"$(seq_hdr $i RateLimit)"
	eq "#$i (lean) no RateLimit-Limit, -Remaining, -Reset" "||" \
		"$(seq_hdr $i RateLimit-Limit)|$(seq_hdr $i RateLimit-Remaining)|$(seq_hdr $i RateLimit-Reset)"
done
eq "#2 (lean) RateLimit counts down over both edges" '"transfer";r=1;t=1' "$(seq_hdr 2 RateLimit)"
check "#4 (lean) 429 has Retry-After" grep -Eqx '[1-9][0-9]*' <<<"$(seq_hdr 4 Retry-After)"
eq "#4 (lean) 429 body names the policy" transfer "$(jq -r '."violated-policies"[0]' "$T/seq.body.4")"
check "B's log: the decision without the trio's variables" \
	grep -q 'account=ACC-4001 .*rl=allow limit=- remaining=- reset=- window=-' "$T/haproxy-B.log"
check "A's log: the full answer" grep -q 'account=ACC-4001 .*rl=allow limit=3 remaining=' "$T/haproxy-A.log"
t_done
