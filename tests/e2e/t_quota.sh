#!/usr/bin/env bash
# The acceptance story with a calendar quota (issue 39): the transfer policy
# as `3/month`, two HAProxy edges, on each engine in turn (redis-engine
# script; then a Redis with the module and redis-engine module):
#   ACC-1001 sends 4 transfers alternating A/B: 3 x 201, then 429 with
#   reason=quota (the edge's log) and a Retry-After that ends at the first
#   of next month, 00:00 UTC, by Redis's clock (bounded by TIME read before
#   and after the request: no timing assertion).
# The agent's config is written here (the shipped policies with the
# transfer line replaced); haproxy/ is the shipped edge, unchanged.
. "$(dirname "$0")/../lib.sh"
t_setup
MODULE=$ROOT/module/ratelimit.so
if [ ! -f "$MODULE" ]; then
	fail "module built (make module): $MODULE missing"
	t_done
	exit
fi
jwt_setup
start_backend
policies=$(edge_policies | sed -E 's|^policy[[:space:]]+transfer[[:space:]].*$|policy transfer 3/month|')
check "the transfer policy is a monthly quota in the agent's config" \
	grep -qx 'policy transfer 3/month' <<<"$policies"
tok=$(mint_token ACC-1001)

# start_redis_with [redis-server args...]: start_redis, with arguments.
start_redis_with() {
	REDIS_PORT=$(free_port)
	redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$T" --logfile "$T/redis-$REDIS_PORT.log" --daemonize no "$@" &
	REDIS_PID=$!
	t_track "$REDIS_PID"
	wait_port "$REDIS_PORT" || { echo "redis did not start"; return 1; }
}

# story ENGINE: the whole stack on redis-engine ENGINE, the four transfers;
# then the stack stopped (the backend stays).
story() {
	local engine=$1 i inst statuses='' retry t0 t1 month end value
	if [ "$engine" = module ]; then
		start_redis_with --loadmodule "$MODULE" || return 1
	else
		start_redis_with || return 1
	fi
	unset AGENT_PORT
	start_agent "$E2E_REDIS_TIMEOUT
redis-engine $engine
$policies" || return 1
	start_haproxy A || return 1
	start_haproxy B || return 1

	t0=$(rcli TIME | head -1)
	req_seq POST "$tok" A /transfers B /transfers A /transfers B /transfers
	t1=$(rcli TIME | head -1)
	t1=$((t1 + 1))
	# the first of next month, 00:00 UTC, of Redis's clock
	month=$(date -u -d "@$t0" +%Y-%m)
	end=$(date -u -d "$month-01 +1 month" +%s)
	for i in 1 2 3 4; do
		inst=A; [ $((i % 2)) = 0 ] && inst=B
		statuses="$statuses $(seq_status $i)"
		echo "# $engine #$i via $inst: $(seq_status $i) limit=$(seq_hdr $i RateLimit-Limit) remaining=$(seq_hdr $i RateLimit-Remaining) reset=$(seq_hdr $i RateLimit-Reset) retry-after=$(seq_hdr $i Retry-After) policy=$(seq_hdr $i RateLimit-Policy) ratelimit=$(seq_hdr $i RateLimit)"
		eq "$engine: #$i served by $inst" "$inst" "$(seq_hdr $i X-Served-By)"
		eq "$engine: #$i RateLimit-Limit is the quota" 3 "$(seq_hdr $i RateLimit-Limit)"
		# w: a month's nominal seconds, 31 days
		eq "$engine: #$i RateLimit-Policy" '"transfer";q=3;w=2678400' "$(seq_hdr $i RateLimit-Policy)"
		if [ "$i" -le 3 ]; then
			eq "$engine: #$i RateLimit-Remaining counts down over both instances" $((3 - i)) \
				"$(seq_hdr $i RateLimit-Remaining)"
			eq "$engine: #$i has no Retry-After" "" "$(seq_hdr $i Retry-After)"
		fi
	done
	eq "$engine: 4 transfers alternating A/B" " 201 201 201 429" "$statuses"
	retry=$(seq_hdr 4 Retry-After)
	check "$engine: #4 Retry-After ends at the period's boundary ($month + 1 month: $((end - t1))..$((end - t0 + 1)) s, got $retry)" \
		test "${retry:-0}" -ge $((end - t1)) -a "${retry:-0}" -le $((end - t0 + 1))
	eq "$engine: #4 RateLimit's t= is the same wait" "\"transfer\";r=0;t=$retry" "$(seq_hdr 4 RateLimit)"
	eq "$engine: #4 problem body names the policy" transfer \
		"$(jq -r '."violated-policies"[0]' "$T/seq.body.4")"
	value=$(rcli GET 'transfer:limit:c1:{jwt:ACC-1001}:month')
	eq "$engine: one string '<end us>:<units>' for the account's month" "${end}000000:3" "$value"
	check "$engine: no log key was written" test -z "$(rcli --scan --pattern 'transfer:limit:v1:*')"
	stop_haproxy A
	stop_haproxy B
	check "$engine: edge B logs the 429 with reason=quota" \
		grep -q 'account=ACC-1001 .*rl=deny .*reason=quota' "$T/haproxy-B.log"
	if [ "$engine" = module ]; then
		check "$engine: the module decided" grep -q 'cmdstat_ratelimit.decide:calls=' \
			<<<"$(rcli INFO commandstats)"
	else
		check "$engine: the script decided" grep -q 'cmdstat_evalsha:calls=' \
			<<<"$(rcli INFO commandstats)"
	fi
	stop_agent
	stop_redis
}

# (a stack that does not start is a failure, not a story skipped: an agent
# that refuses '3/month' must fail this test)
story script || fail "script: the stack started (agent, both edges)"
story module || fail "module: the stack started (agent, both edges)"
t_done
