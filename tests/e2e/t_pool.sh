#!/usr/bin/env bash
# The acceptance story's shape with a pool (issue 37): two HAProxy edges
# and one agent, on each engine in turn (redis-engine script; then a Redis
# with the module and redis-engine module), with
#   pool transfers 5/1m headroom=2
#   policy transfer 3/1m pool=transfers
# (the story's 5/1s and 3/1s on a minute, so that no unit can leave the
# pool while the story runs, however slow the machine):
#   ACC-1001 sends 6 transfers alternating A/B: 3 x 201 on its own limit,
#   then 3 x 429 that its own window refused (no pool reason);
#   ACC-2002 sends 2: both pass (the pool's 4th and 5th units);
#   ACC-3003 sends 2: the pool is full, 2 x 429 with reason=pool-full in the
#   edges' logs and a Retry-After.
# The pool never holds more than 5: its log in Redis holds exactly 5 entries,
# its hash 3 for ACC-1001 and 2 for ACC-2002. haproxy/ is the shipped edge,
# unchanged.
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
policies=$(edge_policies | sed -E 's|^policy[[:space:]]+transfer[[:space:]].*$|pool transfers 5/1m headroom=2\npolicy transfer 3/1m pool=transfers|')
check "the transfer policy is in the pool transfers" \
	grep -qx 'policy transfer 3/1m pool=transfers' <<<"$policies"
t1=$(mint_token ACC-1001)
t2=$(mint_token ACC-2002)
t3=$(mint_token ACC-3003)
LOG='transfers:pool:p1:{transfers}'
ACC='transfers:pool:a1:{transfers}'

# start_redis_with [redis-server args...]: start_redis, with arguments.
start_redis_with() {
	REDIS_PORT=$(free_port)
	redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$T" --logfile "$T/redis-$REDIS_PORT.log" --daemonize no "$@" &
	REDIS_PID=$!
	t_track "$REDIS_PID"
	wait_port "$REDIS_PORT" || { echo "redis did not start"; return 1; }
}

# story ENGINE: the whole stack on redis-engine ENGINE, the ten transfers;
# then the stack stopped (the backend stays).
story() {
	local engine=$1 i statuses retry
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

	req_seq POST "$t1" A /transfers B /transfers A /transfers B /transfers A /transfers B /transfers
	statuses=''
	for i in 1 2 3 4 5 6; do statuses="$statuses $(seq_status $i)"; done
	eq "$engine: ACC-1001, 6 transfers alternating A/B: 3 pass on its own limit" \
		" 201 201 201 429 429 429" "$statuses"
	for i in 4 5 6; do
		check "$engine: ACC-1001 #$i: a Retry-After" test -n "$(seq_hdr $i Retry-After)"
	done
	# the draft's headers: the pool is its own item beside the policy's; the
	# account's own refusal names the account's item ("you are out")
	for i in 1 4; do
		eq "$engine: ACC-1001 #$i: RateLimit-Policy lists the policy and the pool" \
			'"transfer";q=3;w=60, "pool-transfers";q=5;w=60' "$(seq_hdr $i RateLimit-Policy)"
	done
	check "$engine: ACC-1001 #1: RateLimit is the account's item (2 left), got $(seq_hdr 1 RateLimit)" \
		grep -Eq '^"transfer";r=2;t=[0-9]+$' <<<"$(seq_hdr 1 RateLimit)"
	check "$engine: ACC-1001 #4: RateLimit is the account's item (none left), got $(seq_hdr 4 RateLimit)" \
		grep -Eq '^"transfer";r=0;t=[0-9]+$' <<<"$(seq_hdr 4 RateLimit)"
	req_seq POST "$t2" A /transfers B /transfers
	eq "$engine: ACC-2002, 2 transfers: both pass (the pool's 4th and 5th units)" \
		"201 201" "$(seq_status 1) $(seq_status 2)"
	req_seq POST "$t3" A /transfers B /transfers
	eq "$engine: ACC-3003, 2 transfers: the pool is full" "429 429" "$(seq_status 1) $(seq_status 2)"
	for i in 1 2; do
		retry=$(seq_hdr $i Retry-After)
		check "$engine: ACC-3003 #$i: Retry-After until the pool's first unit leaves (1..60 s, got $retry)" \
			test "${retry:-0}" -ge 1 -a "${retry:-0}" -le 60
		# "the service is full": the pool's item, and the legacy trio the pool's
		check "$engine: ACC-3003 #$i: RateLimit is the pool's item (none left), got $(seq_hdr $i RateLimit)" \
			grep -Eq '^"pool-transfers";r=0;t=[0-9]+$' <<<"$(seq_hdr $i RateLimit)"
		eq "$engine: ACC-3003 #$i: RateLimit-Policy lists the policy and the pool" \
			'"transfer";q=3;w=60, "pool-transfers";q=5;w=60' "$(seq_hdr $i RateLimit-Policy)"
		eq "$engine: ACC-3003 #$i: RateLimit-Limit is the pool's" 5 "$(seq_hdr $i RateLimit-Limit)"
	done

	eq "$engine: the pool's log holds 5 units, never more" 5 "$(rcli ZCARD "$LOG")"
	eq "$engine: the pool's hash: ACC-1001 3, ACC-2002 2" "3 2" \
		"$(rcli HGET "$ACC" jwt:ACC-1001) $(rcli HGET "$ACC" jwt:ACC-2002)"
	# (the edges' logs read once they are stopped: every line written)
	stop_haproxy A
	stop_haproxy B
	eq "$engine: the edges log ACC-1001's three 429s" 3 \
		"$(cat "$T/haproxy-A.log" "$T/haproxy-B.log" | grep -c 'account=ACC-1001 .*rl=deny ')"
	for inst in A B; do
		check "$engine: edge $inst logs ACC-3003's 429 with reason=pool-full" \
			grep -q 'account=ACC-3003 .*rl=deny .*reason=pool-full' "$T/haproxy-$inst.log"
		check "$engine: edge $inst logs ACC-1001's 429s without a pool reason" \
			test "$(grep -c 'account=ACC-1001 .*rl=deny .*reason=pool' "$T/haproxy-$inst.log")" = 0
	done
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

story script
story module
t_done
