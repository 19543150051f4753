#!/usr/bin/env bash
# One account, 200 concurrent requests spread over both HAProxy instances:
# exactly the limit is admitted, everything else is 429, nothing is 503.
#
# The windows are widened to one minute here (same policy names, same
# HAProxy config) so the assertion does not depend on how fast a shared
# machine fires 200 requests; the budgets (agent redis-timeout, SPOE
# processing timeout) are raised for the same reason. What is tested is the
# atomicity across instances, not the clock.
. "$(dirname "$0")/../lib.sh"
t_setup
jwt_setup
start_redis
start_agent "redis-timeout 2s
policy transfer 3/1m
policy reads    100/1m  on-redis-error=allow"
start_backend
export RL_SPOE_TIMEOUT=5s
start_haproxy A
start_haproxy B

# burst METHOD PATH N TOKEN: N requests at once, alternating A and B;
# prints one status per line.
burst() {
	local method=$1 path=$2 n=$3 tok=$4 i cfg=$T/burst.curl
	: > "$cfg"
	for i in $(seq "$n"); do
		if [ $((i % 2)) = 0 ]; then echo "url = \"http://127.0.0.1:$HAP_PORT_B$path\""
		else echo "url = \"http://127.0.0.1:$HAP_PORT_A$path\""; fi
		echo "output = \"/dev/null\""
	done >> "$cfg"
	curl -s --no-progress-meter -m 60 --parallel --parallel-immediate --parallel-max "$n" -X "$method" \
		-H "Authorization: Bearer $tok" -w '%{http_code}\n' -K "$cfg"
}

tally() { sort | uniq -c | awk '{ printf "%s%s=%s", sep, $2, $1; sep=" " }'; }

out=$(burst POST /transfers 200 "$(mint_token ACC-BURST)")
echo "# transfers: $(tally <<<"$out")"
eq "200 concurrent transfers: exactly 3 admitted" 3 "$(grep -c '^201$' <<<"$out")"
eq "200 concurrent transfers: the other 197 are 429" 197 "$(grep -c '^429$' <<<"$out")"
eq "200 concurrent transfers: no 503 or other status" 0 "$(grep -vcE '^(201|429)$' <<<"$out")"
eq "Redis holds exactly the admitted entries" 3 "$(rcli zcard transfer:limit:v1:jwt:ACC-BURST)"
eq "the backend saw exactly the admitted transfers" 3 "$(grep -c 'transfers 201.*account=ACC-BURST' "$T/backend.log")"

out=$(burst GET /accounts/ACC-READS 200 "$(mint_token ACC-READS)")
echo "# reads: $(tally <<<"$out")"
eq "200 concurrent reads: exactly 100 admitted" 100 "$(grep -c '^200$' <<<"$out")"
eq "200 concurrent reads: the other 100 are 429" 100 "$(grep -c '^429$' <<<"$out")"

# Another account is untouched by the first one's burst.
req A POST /transfers "$(mint_token ACC-OTHER)"
eq "another account is not affected" 201 "$RSP_STATUS"
t_done
