#!/usr/bin/env bash
# In-flight leases through two HAProxy edges (issue 38): the shipped edge,
# unchanged, and one agent with
#   policy transfer 1000/1m inflight=2
# in front of a backend that holds a request open until the test lets it go
# (tests/e2e/hold_backend.py):
#   ACC-1001 starts two transfers (A, B) that the backend holds: both pass;
#   a third (A) is refused 429 with reason=in-flight and a Retry-After while
#   they run; once the first has its response (its lease released by the
#   edge's ratelimit-done), the third passes (B).
# Redis's own record: the account's leases hold 2 while two run, and none
# once every response came back. Run on HAProxy 2.6 and 3.2 (HAPROXY=).
. "$(dirname "$0")/../lib.sh"
t_setup
jwt_setup
TRANSFERS_PORT=$(free_port)
ACCOUNTS_PORT=$(free_port)
python3 "$(dirname "$0")/hold_backend.py" "$TRANSFERS_PORT" "$T" >>"$T/backend.log" 2>&1 &
t_track $!
wait_port "$TRANSFERS_PORT" || fail "the holding backend started"
start_redis
policies=$(edge_policies | sed -E 's|^policy[[:space:]]+transfer[[:space:]].*$|policy transfer 1000/1m inflight=2|')
start_agent "$E2E_REDIS_TIMEOUT
$policies"
start_haproxy A
start_haproxy B
t1=$(mint_token ACC-1001)
LEASES='transfer:inflight:l1:{jwt:ACC-1001}'

# held NAME EDGE: a transfer the backend holds until go-NAME, in the
# background; its status in $T/held-NAME when it ends.
held() {
	local pv="HAP_PORT_$2"
	curl -s -m 40 -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $t1" \
		-H "X-Hold: $1" "http://127.0.0.1:${!pv}/transfers" > "$T/held-$1" &
	HELD_PID=$!
}
# until_leases N: until Redis holds N leases of the account (20 s at most;
# counted, not timed).
until_leases() { for _ in $(seq 400); do [ "$(rcli ZCARD "$LEASES")" = "$1" ] && return 0; sleep 0.05; done; return 1; }

held r1 A; p1=$HELD_PID
held r2 B; p2=$HELD_PID
check "two transfers held by the backend: Redis holds their 2 leases" until_leases 2
req A POST /transfers "$t1"
eq "a third while two run: 429" 429 "$RSP_STATUS"
retry=$(rsp_hdr Retry-After)
check "its Retry-After is at most the lease (60 s), got $retry" test "${retry:-0}" -ge 1 -a "${retry:-0}" -le 60
eq "the refused request took no slot" 2 "$(rcli ZCARD "$LEASES")"

touch "$T/go-r1"
wait "$p1"
eq "the first held transfer ends: 201" 201 "$(cat "$T/held-r1")"
check "its response released its lease (ratelimit-done)" until_leases 1
req B POST /transfers "$t1"
eq "then the third passes: 201" 201 "$RSP_STATUS"
touch "$T/go-r2"
wait "$p2"
eq "the second held transfer ends: 201" 201 "$(cat "$T/held-r2")"
check "every response came back: no lease left" until_leases 0
eq "the minute's window counted the three admitted, not the refused" 3 \
	"$(rcli ZRANGE 'transfer:limit:v1:{jwt:ACC-1001}:1m' 0 -1 | wc -l)"

stop_haproxy A
stop_haproxy B
check "an edge logs the 429 with reason=in-flight" \
	grep -q 'account=ACC-1001 .*rl=deny .*reason=in-flight' "$T/haproxy-A.log"
check "no release failed or came after its lease's end" \
	test -z "$(grep -E 'lease_release_failed|lease_ended_early' "$T/agent.log")"
stop_agent
t_done
