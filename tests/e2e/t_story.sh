#!/usr/bin/env bash
# The acceptance story (docs/architecture.md, "The story, as a sequence")
# against real processes: redis-server, the agent, the demo backends and two
# HAProxy edges sharing one window.
#   ACC-1001 sends 6 transfers alternating A/B: 3 x 201, then 3 x 429 with
#   Retry-After; once Retry-After has passed a transfer passes again; with
#   Redis stopped a transfer gets 503, never a free pass.
. "$(dirname "$0")/../lib.sh"
t_setup
start_edge A B

tok=$(mint_token ACC-1001)
# One curl process for the 6 requests: the story needs them inside the
# policy's 1s window, and forking per request on a busy machine might not.
req_seq POST "$tok" A /transfers B /transfers A /transfers B /transfers A /transfers B /transfers
statuses=
for i in 1 2 3 4 5 6; do
	inst=A; [ $((i % 2)) = 0 ] && inst=B
	statuses="$statuses $(seq_status $i)"
	echo "# #$i via $inst: $(seq_status $i) limit=$(seq_hdr $i RateLimit-Limit) remaining=$(seq_hdr $i RateLimit-Remaining) reset=$(seq_hdr $i RateLimit-Reset) retry-after=$(seq_hdr $i Retry-After)"
	eq "#$i served by $inst" "$inst" "$(seq_hdr $i X-Served-By)"
	eq "#$i RateLimit-Limit" 3 "$(seq_hdr $i RateLimit-Limit)"
	eq "#$i RateLimit-Policy" '"transfer";q=3;w=1' "$(seq_hdr $i RateLimit-Policy)"
	if [ "$i" -le 3 ]; then
		eq "#$i RateLimit-Remaining counts down over both instances" $((3 - i)) "$(seq_hdr $i RateLimit-Remaining)"
		eq "#$i has no Retry-After" "" "$(seq_hdr $i Retry-After)"
	else
		eq "#$i RateLimit-Remaining" 0 "$(seq_hdr $i RateLimit-Remaining)"
		eq "#$i content type" application/problem+json "$(seq_hdr $i Content-Type)"
		retry=$(seq_hdr $i Retry-After)
		check "#$i Retry-After is whole seconds >= 1 (got '$retry')" grep -Eqx '[1-9][0-9]*' <<<"$retry"
		eq "#$i problem body names the policy" transfer "$(jq -r '."violated-policies"[0]' "$T/seq.body.$i")"
	fi
done
eq "6 transfers alternating A/B" " 201 201 201 429 429 429" "$statuses"

# Wait as long as the edge told the client to wait (the window is 1s); the
# loop tolerates a slow machine instead of asserting on timing.
sleep "${retry:-1}"
for _ in $(seq 20); do
	req B POST /transfers "$tok"
	[ "$RSP_STATUS" = 201 ] && break
	sleep 0.25
done
eq "after Retry-After a transfer passes again" 201 "$RSP_STATUS"

stop_redis
req A POST /transfers "$tok"
eq "Redis down: transfer refused with 503 (fail-closed)" 503 "$RSP_STATUS"
eq "Redis down: 503 is a problem document" application/problem+json "$(rsp_hdr Content-Type)"
eq "Redis down: no RateLimit headers without a decision" "" "$(rsp_hdr RateLimit-Limit)"
check "Redis down: reason given" grep -q '"reason":"redis' "$T/rsp.body"
t_done
