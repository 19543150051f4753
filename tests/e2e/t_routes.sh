#!/usr/bin/env bash
# routes.map's forms on the demo edge (two instances), with a map of its own:
# the default line "*" decides every unlisted path by address, in one window
# for both instances; an exempt line ("-") is never limited; an exact line
# ("?") takes its path only; a host-scoped line wins over host-less ones for
# its Host; "jwt|ip anon=<policy>" counts a caller without a token by address
# against its own policy and a caller with one by account (a bad token is
# still 401); behind a trusted proxy the address is the last X-Forwarded-For
# entry, IPv6 per /64, and from anyone else X-Forwarded-For is ignored; the
# canonical-path refusal still answers 400 before any of it.
. "$(dirname "$0")/../lib.sh"
t_setup

mkdir -p "$T/hap"
cp -r "$ROOT/haproxy/." "$T/hap/"
cat > "$T/hap/routes.map" <<'MAP'
GET/status?                   -
api.example.com:GET/accounts/ -
GET/accounts/open?            -
GET/accounts/                 reads     jwt|ip anon=anon fail=open
POST/transfers                transfer
*                             anon      ip     fail=open
MAP
POLICIES="policy transfer 3/1s
policy reads 100/1m on-redis-error=allow
policy anon 4/1m on-redis-error=allow"
printf 'listen 127.0.0.1:1\nredis redis://127.0.0.1:1/0\n%s\n' "$POLICIES" > "$T/check.conf"
check "the agent accepts the map (--routes)" "$AGENT" -c -f "$T/check.conf" --routes "$T/hap/routes.map"

HAPROXY_FILES=$T/hap
jwt_setup
start_redis
start_agent "$E2E_REDIS_TIMEOUT
$POLICIES"
start_backend
echo 127.0.0.1 > "$T/trusted.lst"
# A and B trust 127.0.0.1 as a proxy, so each case below is its own
# "client" through X-Forwarded-For (the agent remembers a denied key for its
# Retry-After: a fresh address per case, not a deleted window).
export RL_TRUSTED_PROXIES=$T/trusted.lst
start_haproxy A; start_haproxy B
unset RL_TRUSTED_PROXIES
start_haproxy C        # trusts no proxy

# --- the default line: anonymous, by address, across both instances ---------
for i in 1 2 3 4; do
	inst=A; [ $((i % 2)) = 0 ] && inst=B
	req $inst GET /no/such/path "" -H "X-Forwarded-For: 192.0.2.10"
	eq "unlisted path #$i on $inst: a decision (the demo's 404)" 404 "$RSP_STATUS"
	eq "unlisted path #$i on $inst: RateLimit-Remaining counts over both" $((4 - i)) "$(rsp_hdr RateLimit-Remaining)"
done
req B GET /another/path "" -H "X-Forwarded-For: 192.0.2.10"
eq "unlisted path #5: 429 (one window for both instances)" 429 "$RSP_STATUS"
check "unlisted path #5: Retry-After" test -n "$(rsp_hdr Retry-After)"
eq "the window is the address's (ip:192.0.2.10)" 4 "$(rcli zcard anon:limit:v1:ip:192.0.2.10)"

# --- exempt, exact, host-scoped ----------------------------------------------
keys=$(rcli dbsize)
req A GET /status "" -H "X-Forwarded-For: 192.0.2.10"
eq "exempt /status: no RateLimit-Limit" "" "$(rsp_hdr RateLimit-Limit)"
check "exempt /status: not refused though the address is over its limit" test "$RSP_STATUS" != 429
req A GET /accounts/open ""
eq "exempt exact /accounts/open: served without identity" 200 "$RSP_STATUS"
eq "exempt exact /accounts/open: no RateLimit-Limit" "" "$(rsp_hdr RateLimit-Limit)"
req A GET /accounts/ACC-R1 "" -H "Host: API.Example.com:8443"
eq "host-scoped exempt line for its Host (any case, any port): served" 200 "$RSP_STATUS"
eq "host-scoped exempt line: no RateLimit-Limit" "" "$(rsp_hdr RateLimit-Limit)"
eq "nothing of these reached Redis" "$keys" "$(rcli dbsize)"
req A GET /status/more "" -H "X-Forwarded-For: 192.0.2.10"
eq "/status/more is not /status (exact): the default line refuses it (429)" 429 "$RSP_STATUS"
req A GET /accounts/openx "$(mint_token ACC-R2)"
eq "/accounts/openx is not /accounts/open (exact): the account's line" 200 "$RSP_STATUS"
check "/accounts/openx: decided by reads ($(rsp_hdr RateLimit-Policy))" \
	grep -q '^"reads";' <<<"$(rsp_hdr RateLimit-Policy)"

# --- the account, else the address --------------------------------------------
req A GET /accounts/ACC-R3 "" -H "X-Forwarded-For: 192.0.2.20"
eq "jwt|ip without a token: served" 200 "$RSP_STATUS"
check "jwt|ip without a token: the anon policy decided ($(rsp_hdr RateLimit-Policy))" \
	grep -q '^"anon";' <<<"$(rsp_hdr RateLimit-Policy)"
eq "jwt|ip without a token: counted for the address" 1 "$(rcli zcard anon:limit:v1:ip:192.0.2.20)"
eq "jwt|ip without a token: no X-Account reaches the backend" "" "$(jq -r .account "$T/rsp.body")"
req A GET /accounts/ACC-R3 "$(mint_token ACC-R3)"
check "jwt|ip with a token: the account's policy decided ($(rsp_hdr RateLimit-Policy))" \
	grep -q '^"reads";' <<<"$(rsp_hdr RateLimit-Policy)"
eq "jwt|ip with a token: X-Account is the sub" ACC-R3 "$(jq -r .account "$T/rsp.body")"
req A GET /accounts/ACC-R3 "not.a.token"
eq "jwt|ip with a bad token: 401 (not the address)" 401 "$RSP_STATUS"

# --- the address: trusted proxies, IPv6 per /64 -------------------------------
for xff in 2001:db8:1:2::5 2001:db8:1:2:ffff::6; do
	req A GET /nowhere "" -H "X-Forwarded-For: 203.0.113.9, $xff"
done
eq "behind a trusted proxy: its X-Forwarded-For hop, IPv6 per /64" 2 \
	"$(rcli zcard anon:limit:v1:ip:2001:db8:1:2::)"
req A GET /nowhere "" -H "X-Forwarded-For: 2001:db8:1:3::5"
eq "another /64: another window" 1 "$(rcli zcard anon:limit:v1:ip:2001:db8:1:3::)"
req C GET /nowhere "" -H "X-Forwarded-For: 198.51.100.7"
eq "from an untrusted peer, X-Forwarded-For is ignored" "0 1" \
	"$(rcli exists anon:limit:v1:ip:198.51.100.7) $(rcli zcard anon:limit:v1:ip:127.0.0.1)"

# --- the canonical-path refusal still comes first ------------------------------
keys=$(rcli dbsize)
for p in //status /%73tatus /x/../status //no/such/path /accounts/%6fpen; do
	RSP_STATUS=$(curl -s -m 10 --path-as-is -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HAP_PORT_A$p")
	eq "GET $p: 400" 400 "$RSP_STATUS"
done
eq "the refused spellings reached no window" "$keys" "$(rcli dbsize)"
t_done
