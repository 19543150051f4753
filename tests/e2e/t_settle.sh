#!/usr/bin/env bash
# Reserve, then settle through two HAProxy edges (issue 38): the shipped
# edge, unchanged, and one agent with
#   policy transfer 1000/1m settle=x-usage-units
# in front of a backend that answers "x-usage-units: <n>" when asked
# (tests/e2e/hold_backend.py, "X-Usage: <n>"):
#   a transfer of ACC-1001 reserves 1 and its response says it cost 5: that
#   response's RateLimit fields already say what is left after the settle
#   (995), and the next transfer (on the other edge) sees 4 fewer remaining
#   than it would have; a response without the header leaves the
#   reservation (1); one that says 0 gives the unit back, and says so; a
#   cost in another header than the policy's counts nothing, and after a
#   reload to settle=x-tokens an X-Tokens header settles (the agent reads
#   the policy's header in the response's headers, res.hdrs_bin).
# Redis's own record: the account's window holds what the responses said.
# Run on HAProxy 2.6 and 3.2 (HAPROXY=).
. "$(dirname "$0")/../lib.sh"
t_setup
jwt_setup
TRANSFERS_PORT=$(free_port)
ACCOUNTS_PORT=$(free_port)
python3 "$(dirname "$0")/hold_backend.py" "$TRANSFERS_PORT" "$T" >>"$T/backend.log" 2>&1 &
t_track $!
wait_port "$TRANSFERS_PORT" || fail "the backend started"
start_redis
policies=$(edge_policies | sed -E 's|^policy[[:space:]]+transfer[[:space:]].*$|policy transfer 1000/1m settle=x-usage-units|')
start_agent "$E2E_REDIS_TIMEOUT
$policies"
start_haproxy A
start_haproxy B
t1=$(mint_token ACC-1001)
WIN='transfer:limit:v1:{jwt:ACC-1001}:1m'
# units: what the account's window holds, by Redis's record
units() { local s=0 m; for m in $(rcli ZRANGE "$WIN" 0 -1); do s=$((s + 16#${m#*:})); done; echo "$s"; }
# rem: the remaining of the response's RateLimit field
rem() { rsp_hdr RateLimit | sed -E 's/.*;r=([0-9]+).*/\1/'; }
# until_units N: until the window holds N (20 s at most; counted, not timed)
until_units() { for _ in $(seq 400); do [ "$(units)" = "$1" ] && return 0; sleep 0.05; done; return 1; }

req A POST /transfers "$t1" -H "X-Usage: 5"
eq "a transfer that cost 5: 201" 201 "$RSP_STATUS"
eq "it reserved 1, its response settled 5: the response says 995 remaining (after the settle)" \
	995 "$(rem)"
eq "and so does the legacy field" 995 "$(rsp_hdr RateLimit-Remaining)"
eq "the settle was answered before the response left: the window holds 5" 5 "$(units)"
req B POST /transfers "$t1"
eq "the next transfer: 201" 201 "$RSP_STATUS"
eq "it sees 4 fewer remaining: 994" 994 "$(rem)"
check "a response without the header: its reservation stands (6)" until_units 6
req A POST /transfers "$t1" -H "X-Usage: 50" -H "X-Usage-Header: x-other-units"
eq "a response that names its cost in another header than the policy's: 201" 201 "$RSP_STATUS"
eq "the agent reads the policy's header (x-usage-units) in the response's headers: the reservation stands (7)" \
	7 "$(units)"
req A POST /transfers "$t1" -H "X-Usage: 0"
eq "a transfer that cost nothing: 201" 201 "$RSP_STATUS"
eq "its unit comes back before the response leaves: the window holds 7" 7 "$(units)"
eq "and its response says so: 993 remaining" 993 "$(rem)"
eq "no reservation record left but the two that named no cost" 2 \
	"$(rcli KEYS 'transfer:settle:s1:*' | grep -c .)"
# A policy whose settle= names another header than the edge's x-usage-units
# (a reload): the agent finds it in the response's headers (hdrs,
# res.hdrs_bin), the edge unchanged.
sed -i -E 's|^(policy[[:space:]]+transfer[[:space:]].*settle=)x-usage-units|\1x-tokens|' "$T/agent.conf"
kill -HUP "$AGENT_PID"
for _ in $(seq 100); do grep -q 'event=reloaded' "$T/agent.log" && break; sleep 0.1; done
check "the agent reloaded with settle=x-tokens" grep -q 'event=reloaded' "$T/agent.log"
req B POST /transfers "$t1" -H "X-Usage: 5" -H "X-Usage-Header: X-Tokens"
eq "a transfer that cost 5 by X-Tokens: 201" 201 "$RSP_STATUS"
eq "settled by the policy's own header: the window holds 7 + 5" 12 "$(units)"
eq "and its response says so: 988 remaining" 988 "$(rem)"
t_done
