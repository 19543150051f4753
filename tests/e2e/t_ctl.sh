#!/usr/bin/env bash
# ratelimit-spoa ctl against the real stack: two HAProxy edges, each on an
# agent of its own (A on the first, B on a second with the same config),
# one Redis.
#   ctl override ... block on jwt:ACC-1001: both edges answer 429 with
#   reason=blocked in their log (no reload, within the poll bound: waited
#   for, not timed); --remove: transfers pass again.
#   exports (2/1s 5/1h) used up for the hour: ctl show says used 5,
#   remaining 0; ctl reset: the next request passes (only the reset can do
#   that within the hour); a transfer passes after a reset too.
. "$(dirname "$0")/../lib.sh"
t_setup
start_edge A || exit 1
AGENT_A=$AGENT_PORT
# the second agent: the same config on its own port, for edge B
AGENT_PORT=$(free_port)
sed "s/^listen .*/listen 127.0.0.1:$AGENT_PORT/" "$T/agent.conf" > "$T/agent-b.conf"
"$AGENT" -f "$T/agent-b.conf" >>"$T/agent-b.log" 2>&1 &
t_track $!
wait_port "$AGENT_PORT" || { echo "agent b did not start"; exit 1; }
start_haproxy B || exit 1
CONF=$T/agent.conf
ctl() { "$AGENT" ctl -c "$CONF" "$@"; }

# wait_for SECS CMD...: until CMD succeeds (every 0.25 s), at most SECS.
wait_for() {
	local n=$(($1 * 4)); shift
	for _ in $(seq "$n"); do "$@" && return 0; sleep 0.25; done
	return 1
}

tok=$(mint_token ACC-1001)
req A POST /transfers "$tok"
eq "before: A admits a transfer" 201 "$RSP_STATUS"

check "ctl override block: exit 0" ctl override transfer jwt:ACC-1001 block --for 1m --reason "e2e fraud"
# the block's 429: Retry-After is its time left (~60 s), not the 1 s window's
blocked() { req "$1" POST /transfers "$tok"; [ "$RSP_STATUS" = 429 ] && [ "$(rsp_hdr Retry-After)" -ge 2 ]; }
check "edge A answers 429 once its agent sees the block" wait_for 15 blocked A
check "edge B answers 429 once its agent sees the block" wait_for 15 blocked B
retry=$(rsp_hdr Retry-After)
check "the block's Retry-After is its time left, 2..60 s (got '$retry')" \
	test "${retry:-0}" -ge 2 -a "${retry:-0}" -le 60
for n in A B; do
	check "edge $n logs the 429 with reason=blocked" \
		grep -q "rl=deny .*reason=blocked" "$T/haproxy-$n.log"
done
check "agent A logged the change (who, why)" grep -q 'event=live_override_change.*e2e%20fraud\|event=live_override_change.*e2e fraud' "$T/agent.log"
check "agent B logged the change (who, why)" grep -q 'event=live_override_change.*e2e' "$T/agent-b.log"
out=$(ctl overrides)
check "ctl overrides lists the block with its reason" grep -q "jwt:ACC-1001.*block.*e2e fraud" <<<"$out"

check "ctl override --remove: exit 0" ctl override transfer jwt:ACC-1001 --remove
passes() { req "$1" POST /transfers "$tok"; [ "$RSP_STATUS" = 201 ]; }
check "edge A admits transfers again" wait_for 15 passes A
check "edge B admits transfers again" wait_for 15 passes B

# exports: 5 per hour (and 2 per second); use up the hour
used=0
for _ in $(seq 200); do
	req A POST /exports "$tok"
	[ "$RSP_STATUS" = 201 ] && used=$((used + 1))   # admitted (the demo routes /exports to the transfers backend)
	[ "$used" -ge 5 ] && break
	sleep 0.3
done
eq "5 exports admitted" 5 "$used"
req B POST /exports "$tok"
eq "the 6th export in the hour is refused" 429 "$RSP_STATUS"
eq "refused by the hour's window (the RateLimit item that decided)" '"exports-1h";r=0' \
	"$(rsp_hdr RateLimit | cut -d';' -f1-2)"
show=$(ctl show exports jwt:ACC-1001 --json)
eq "ctl show: the hour's window used 5, remaining 0" "5 0" \
	"$(jq -r '.windows[] | select(.window_ms == 3600000) | "\(.used) \(.remaining)"' <<<"$show")"
check "ctl show: its reset is within the hour" \
	test "$(jq -r '.windows[] | select(.window_ms == 3600000) | .reset' <<<"$show")" -le 3600
check "ctl reset: exit 0" ctl reset exports jwt:ACC-1001
show=$(ctl show exports jwt:ACC-1001 --json)
eq "ctl show after the reset: nothing used" "0 0" "$(jq -r '[.windows[].used] | join(" ")' <<<"$show")"
exported() { req "$1" POST /exports "$tok"; [ "$RSP_STATUS" = 201 ]; }
check "after the reset an export passes on B (within the hour)" wait_for 15 exported B
check "and on A" wait_for 15 exported A
check "both agents logged the reset" grep -q "event=live_reset.*policy=exports" "$T/agent-b.log"

# the transfer window: exhausted, reset, passes
req_seq POST "$tok" A /transfers B /transfers A /transfers B /transfers
check "transfers exhausted (a 429 among 4)" grep -q '^429 ' "$T/seq.out"
check "ctl reset transfer: exit 0" ctl reset transfer jwt:ACC-1001
check "after the reset a transfer passes" wait_for 15 passes A
t_done
