#!/usr/bin/env bash
# The acceptance story's shape with a token bucket (issue 30): the transfer
# policy as `3/1s algorithm=gcra burst=3`, two HAProxy edges, on each engine
# in turn (redis-engine script; then a Redis with the module and
# redis-engine module):
#   ACC-1001 sends 6 transfers alternating A/B: 3 x 201, then 3 x 429 with
#   Retry-After; a third of a second later (we wait 0.4 s) one passes again.
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
policies=$(edge_policies | sed -E 's|^policy[[:space:]]+transfer[[:space:]].*$|policy transfer 3/1s algorithm=gcra burst=3|')
check "the transfer policy is a GCRA bucket in the agent's config" \
	grep -qx 'policy transfer 3/1s algorithm=gcra burst=3' <<<"$policies"
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

# story ENGINE: the whole stack on redis-engine ENGINE, the six transfers,
# the one after 0.4 s; then the stack stopped (the backend stays).
story() {
	local engine=$1 i inst statuses='' retry key_type log_keys
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

	req_seq POST "$tok" A /transfers B /transfers A /transfers B /transfers A /transfers B /transfers
	# (at once: the key lives until the bucket is full again, about 1 s)
	key_type=$(rcli TYPE 'transfer:limit:g1:{jwt:ACC-1001}')
	log_keys=$(rcli --scan --pattern 'transfer:limit:v1:*')
	eq "$engine: the bucket is one string under g1" string "$key_type"
	check "$engine: no log key was written" test -z "$log_keys"
	for i in 1 2 3 4 5 6; do
		inst=A; [ $((i % 2)) = 0 ] && inst=B
		statuses="$statuses $(seq_status $i)"
		echo "# $engine #$i via $inst: $(seq_status $i) limit=$(seq_hdr $i RateLimit-Limit) remaining=$(seq_hdr $i RateLimit-Remaining) reset=$(seq_hdr $i RateLimit-Reset) retry-after=$(seq_hdr $i Retry-After) ratelimit=$(seq_hdr $i RateLimit)"
		eq "$engine: #$i served by $inst" "$inst" "$(seq_hdr $i X-Served-By)"
		eq "$engine: #$i RateLimit-Limit is the burst" 3 "$(seq_hdr $i RateLimit-Limit)"
		# q = the burst, w = the time the bucket takes to refill (3 x 1/3 s)
		eq "$engine: #$i RateLimit-Policy" '"transfer";q=3;w=1' "$(seq_hdr $i RateLimit-Policy)"
		if [ "$i" -le 3 ]; then
			eq "$engine: #$i RateLimit-Remaining counts down over both instances" $((3 - i)) \
				"$(seq_hdr $i RateLimit-Remaining)"
			eq "$engine: #$i RateLimit names the policy, remaining and reset" \
				"\"transfer\";r=$((3 - i));t=1" "$(seq_hdr $i RateLimit)"
			eq "$engine: #$i has no Retry-After" "" "$(seq_hdr $i Retry-After)"
		else
			eq "$engine: #$i RateLimit-Remaining" 0 "$(seq_hdr $i RateLimit-Remaining)"
			retry=$(seq_hdr $i Retry-After)
			# the exact wait is a third of a second at most, rounded up
			eq "$engine: #$i Retry-After: one second (1/3 s, rounded up)" 1 "$retry"
			eq "$engine: #$i problem body names the policy" transfer \
				"$(jq -r '."violated-policies"[0]' "$T/seq.body.$i")"
		fi
	done
	eq "$engine: 6 transfers alternating A/B" " 201 201 201 429 429 429" "$statuses"

	# One unit is back a third of a second after the first admission; the
	# six were sent before this sleep starts, so 0.4 s is enough however
	# slowly they went (later only adds units).
	sleep 0.4
	req B POST /transfers "$tok"
	eq "$engine: a third of a second later, one passes" 201 "$RSP_STATUS"

	if [ "$engine" = module ]; then
		check "$engine: the module decided" grep -q 'cmdstat_ratelimit.decide:calls=' \
			<<<"$(rcli INFO commandstats)"
	else
		check "$engine: the script decided" grep -q 'cmdstat_evalsha:calls=' \
			<<<"$(rcli INFO commandstats)"
	fi
	stop_haproxy A
	stop_haproxy B
	stop_agent
	stop_redis
}

story script
story module
t_done
