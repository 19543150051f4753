#!/usr/bin/env bash
# "<kind>|ip" routes fall back to the address only for a request that
# presents no credential of that kind: two X-API-Key headers, a second
# Authorization header, a non-bearer Authorization, a token with a bad
# signature, expired or for another audience, each get 401 with its reason,
# never the address. And the address itself: a client that is not a trusted
# proxy cannot choose it with X-Forwarded-For; a trusted proxy's is read.
. "$(dirname "$0")/../lib.sh"
t_setup
J=$ROOT/tools/jwt.sh

mkdir -p "$T/hap"
cp -r "$ROOT/haproxy/." "$T/hap/"
cat > "$T/hap/routes.map" <<'MAP'
GET/partner/accounts/   reads   key|ip  anon=anon
GET/public/             reads   jwt|ip  anon=anon
GET/accounts/           reads   ip
*                       anon    ip      fail=open
MAP
printf 'k-alpha-123 ACC-K\nk-beta-456 ACC-K\nk-gamma-789 ACC-G\n' > "$T/apikeys.map"
POLICIES="policy reads 100/1m
policy anon 60/1m on-redis-error=allow"
HAPROXY_FILES=$T/hap
export RL_APIKEYS_MAP=$T/apikeys.map
jwt_setup
"$J" keygen "$T/other" >/dev/null
start_redis
start_agent "$E2E_REDIS_TIMEOUT
$POLICIES"
start_backend
echo 10.0.0.0/8 > "$T/trusted-other"; echo 192.0.2.1 >> "$T/trusted-other"
echo 127.0.0.1 > "$T/trusted-local"
RL_TRUSTED_PROXIES=$T/trusted-other start_haproxy A     # the client is no trusted proxy
RL_TRUSTED_PROXIES=$T/trusted-local start_haproxy B     # the client is one

detail() { jq -r .detail "$T/rsp.body" 2>/dev/null; }
policy_of() { rsp_hdr RateLimit-Policy | sed -n 's/^"\([^"]*\)".*/\1/p'; }
ANON=anon:limit:v1:ip:127.0.0.1

# --- key|ip -------------------------------------------------------------------
req A GET /partner/accounts/x ""
eq "key|ip without X-API-Key: served" 200 "$RSP_STATUS"
eq "key|ip without X-API-Key: counted by address under anon" anon "$(policy_of)"
req A GET /partner/accounts/x "" -H "X-API-Key: k-alpha-123"
eq "key|ip, one valid key: served" 200 "$RSP_STATUS"
eq "key|ip, one valid key: its account" ACC-K "$(jq -r .account "$T/rsp.body")"
anon=$(rcli zcard "$ANON")
while IFS='|' read -r what want h1 h2; do
	args=(-H "$h1"); [ -n "$h2" ] && args+=(-H "$h2")
	req A GET /partner/accounts/x "" "${args[@]}"
	eq "key|ip, $what: 401" 401 "$RSP_STATUS"
	eq "key|ip, $what: why" "$want" "$(detail)"
done <<CASES
two valid keys of one account|multiple-api-key-headers|X-API-Key: k-alpha-123|X-API-Key: k-beta-456
two valid keys of two accounts|multiple-api-key-headers|X-API-Key: k-gamma-789|X-API-Key: k-alpha-123
the same key twice|multiple-api-key-headers|X-API-Key: k-alpha-123|X-API-Key: k-alpha-123
a valid key and an unknown one|multiple-api-key-headers|X-API-Key: k-alpha-123|X-API-Key: k-nope
an unknown key|unknown-api-key|X-API-Key: k-nope|
an empty X-API-Key|unknown-api-key|X-API-Key;|
two keys in one header|unknown-api-key|X-API-Key: k-alpha-123, k-beta-456|
CASES
eq "key|ip: no refused request counted by address" "$anon" "$(rcli zcard "$ANON")"

# --- jwt|ip -------------------------------------------------------------------
req A GET /public/x ""
eq "jwt|ip without Authorization: served" 200 "$RSP_STATUS"
eq "jwt|ip without Authorization: under anon" anon "$(policy_of)"
req A GET /public/x "$(mint_token ACC-J)"
eq "jwt|ip, a valid token: served" 200 "$RSP_STATUS"
eq "jwt|ip, a valid token: under reads" reads "$(policy_of)"
anon=$(rcli zcard "$ANON")
key=$T/jwt/jwt-private.pem
good=$(mint_token ACC-J)
while IFS='|' read -r what want h1 h2; do
	args=(-H "$h1"); [ -n "$h2" ] && args+=(-H "$h2")
	req A GET /public/x "" "${args[@]}"
	eq "jwt|ip, $what: 401" 401 "$RSP_STATUS"
	eq "jwt|ip, $what: why" "$want" "$(detail)"
done <<CASES
a bad signature (altered payload)|invalid-signature|Authorization: Bearer $("$J" mint --key "$key" --sub ACC-J --tamper)|
signed by another key|invalid-signature|Authorization: Bearer $("$J" mint --key "$T/other/jwt-private.pem" --sub ACC-J)|
expired|token-expired|Authorization: Bearer $("$J" mint --key "$key" --sub ACC-J --ttl -3600)|
for another audience|invalid-audience|Authorization: Bearer $("$J" mint --key "$key" --sub ACC-J --aud other-api)|
alg none|algorithm-not-allowed|Authorization: Bearer $("$J" mint --key x --alg none --sub ACC-J)|
two valid Authorization headers|multiple-authorization-headers|Authorization: Bearer $good|Authorization: Bearer $good
a Basic credential|missing-bearer-token|Authorization: Basic dXNlcjpwYXNz|
an empty bearer|missing-bearer-token|Authorization: Bearer|
an empty Authorization|missing-bearer-token|Authorization;|
CASES
eq "jwt|ip: no refused request counted by address" "$anon" "$(rcli zcard "$ANON")"

# --- the address: X-Forwarded-For only from a trusted proxy --------------------
rcli del reads:limit:v1:ip:127.0.0.1 >/dev/null
for xff in 198.51.100.7 "203.0.113.9, 198.51.100.8" 192.0.2.1; do
	req A GET /accounts/x "" -H "X-Forwarded-For: $xff"
	eq "not a trusted proxy, X-Forwarded-For $xff: served" 200 "$RSP_STATUS"
done
req A GET /accounts/x "" -H "X-Forwarded_For: 198.51.100.9"
eq "counted against the connection's address whatever X-Forwarded-For said" 4 "$(rcli zcard reads:limit:v1:ip:127.0.0.1)"
eq "no window for a forwarded address" "" "$(rcli keys 'reads:*:ip:1[99]*' | xargs)"
req B GET /accounts/x "" -H "X-Forwarded-For: 198.51.100.7"
eq "from a trusted proxy: its X-Forwarded-For address" 1 "$(rcli zcard reads:limit:v1:ip:198.51.100.7)"
req B GET /accounts/x "" -H "X-Forwarded-For: 203.0.113.9, 198.51.100.8"
eq "from a trusted proxy: the last X-Forwarded-For address (the one it added)" 1 "$(rcli zcard reads:limit:v1:ip:198.51.100.8)"
eq "... not an earlier one" 0 "$(rcli zcard reads:limit:v1:ip:203.0.113.9)"
eq "the trusted proxy's own address counted nothing" 4 "$(rcli zcard reads:limit:v1:ip:127.0.0.1)"
t_done
