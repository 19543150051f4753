#!/usr/bin/env bash
# The three identities a route can pick in routes.map, end to end with real
# HAProxy (keys and certificates made here with openssl):
#   jwt   RS256 and ES256 tokens            key jwt:<sub>
#   key   X-API-Key looked up in a map      key key:<account>
#   cert  the CN of a mutual-TLS client     key cert:<CN>
# Each kind has its own key prefix, so the same name under two kinds never
# shares a window.
. "$(dirname "$0")/../lib.sh"
t_setup
J=$ROOT/tools/jwt.sh

# ES256 key pair, API keys, a CA with a client certificate, a server certificate.
"$J" keygen "$T/ec" --ec >/dev/null
"$J" keygen "$T/ec-other" --ec >/dev/null
printf 'k-alpha-123 ACC-K\nk-beta-456 ACC-K\nk-bad ACC EVIL\n' > "$T/apikeys.map"
pki() {
	local d=$T/pki
	mkdir -p "$d"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
		-subj "/CN=$1" -keyout "$d/$1.key" -out "$d/$1.pem" 2>/dev/null
}
issue() {   # issue NAME CA: a certificate for CN=NAME signed by CA
	local d=$T/pki
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
		-keyout "$d/$1.key" -out "$d/$1.csr" 2>/dev/null
	openssl x509 -req -in "$d/$1.csr" -CA "$d/$2.pem" -CAkey "$d/$2.key" -CAcreateserial \
		-days 2 -out "$d/$1.pem" 2>/dev/null
}
pki client-ca; pki other-ca; pki edge-server
issue svc-billing client-ca
issue svc-rogue other-ca
cat "$T/pki/edge-server.pem" "$T/pki/edge-server.key" > "$T/pki/edge-server.bundle"

TLS_PORT=$(free_port)
export RL_JWT_ES256_PUBKEY=$T/ec/jwt-public.pem RL_APIKEYS_MAP=$T/apikeys.map
export RL_TLS_BIND=127.0.0.1:$TLS_PORT RL_TLS_CERT=$T/pki/edge-server.bundle RL_TLS_CA=$T/pki/client-ca.pem
start_edge A
unset RL_JWT_ES256_PUBKEY RL_TLS_BIND
start_haproxy B        # no ES256 key, no TLS listener

# --- jwt: RS256 and ES256 ---------------------------------------------------
req A POST /transfers "$(mint_token ACC-J)"
eq "RS256 token: 201" 201 "$RSP_STATUS"
req A POST /transfers "$("$J" mint --alg ES256 --key "$T/ec/jwt-private.pem" --sub ACC-J)"
eq "ES256 token: 201" 201 "$RSP_STATUS"
eq "ES256: X-Account is the sub" ACC-J "$(jq -r .account "$T/rsp.body")"
eq "RS256 and ES256 count in one window (jwt:ACC-J)" 2 "$(rcli zcard transfer:limit:v1:jwt:ACC-J)"
req A POST /transfers "$("$J" mint --alg ES256 --key "$T/ec-other/jwt-private.pem" --sub ACC-J)"
eq "ES256 signed by another key: 401" 401 "$RSP_STATUS"
eq "ES256 signed by another key: why" invalid-signature "$(jq -r .detail "$T/rsp.body")"
req B POST /transfers "$("$J" mint --alg ES256 --key "$T/ec/jwt-private.pem" --sub ACC-J)"
eq "ES256 without RL_JWT_ES256_PUBKEY: 401" 401 "$RSP_STATUS"
eq "ES256 without RL_JWT_ES256_PUBKEY: why" algorithm-not-allowed "$(jq -r .detail "$T/rsp.body")"

# --- key: X-API-Key -> account ----------------------------------------------
req A GET /partner/accounts/x "" -H "X-API-Key: k-alpha-123"
eq "API key: 200" 200 "$RSP_STATUS"
eq "API key: X-Account is the mapped account" ACC-K "$(jq -r .account "$T/rsp.body")"
eq "API key: RateLimit-Remaining" 99 "$(rsp_hdr RateLimit-Remaining)"
req A GET /partner/accounts/x "" -H "X-API-Key: k-beta-456"
eq "a second key of the same account shares its window" 98 "$(rsp_hdr RateLimit-Remaining)"
eq "API keys count under key:ACC-K" 2 "$(rcli zcard reads:limit:v1:key:ACC-K)"
for c in "no key|" "unknown key|X-API-Key: k-nope" "mapped to a bad account|X-API-Key: k-bad"; do
	IFS='|' read -r name h <<<"$c"
	args=(); [ -n "$h" ] && args=(-H "$h")
	req A GET /partner/accounts/x "" "${args[@]}"
	eq "API key, $name: 401" 401 "$RSP_STATUS"
	eq "API key, $name: no RateLimit header" "" "$(rsp_hdr RateLimit-Limit)"
done
req A GET /partner/accounts/x "" -H "X-API-Key: k-alpha-123" -H "X-API-Key: k-nope"
eq "two X-API-Key headers: 401" 401 "$RSP_STATUS"
req A GET /partner/accounts/x "$(mint_token ACC-K)"
eq "a JWT is no API key on a key route: 401" 401 "$RSP_STATUS"

# The same name as a JWT subject is another identity: its own window.
req A GET /accounts/x "$(mint_token ACC-K)"
eq "jwt:ACC-K does not share key:ACC-K's window" 99 "$(rsp_hdr RateLimit-Remaining)"

# --- cert: mutual TLS -------------------------------------------------------
tls() {   # tls PATH [curl args]: GET over the TLS listener of A
	local path=$1; shift
	RSP_STATUS=$(curl -s -m 10 -k "$@" -D "$T/rsp.hdr" -o "$T/rsp.body" -w '%{http_code}' \
		"https://127.0.0.1:$TLS_PORT$path")
}
tls /internal/accounts/x --cert "$T/pki/svc-billing.pem" --key "$T/pki/svc-billing.key"
eq "client certificate: 200" 200 "$RSP_STATUS"
eq "client certificate: X-Account is its CN" svc-billing "$(jq -r .account "$T/rsp.body")"
eq "client certificate: RateLimit-Remaining" 99 "$(rsp_hdr RateLimit-Remaining)"
eq "client certificate counts under cert:svc-billing" 1 "$(rcli zcard reads:limit:v1:cert:svc-billing)"
tls /internal/accounts/x
eq "no client certificate: 401" 401 "$RSP_STATUS"
eq "no client certificate: why" missing-client-certificate "$(jq -r .detail "$T/rsp.body")"
tls /internal/accounts/x --cert "$T/pki/svc-rogue.pem" --key "$T/pki/svc-rogue.key"
check "certificate of another CA: refused ($RSP_STATUS)" test "$RSP_STATUS" != 200
req A GET /internal/accounts/x "$(mint_token svc-billing)"
eq "cert route over plain HTTP: 401" 401 "$RSP_STATUS"
# (transfer's 1s keys may have expired by now: only the 1m windows are listed)
# (each window's key, and the 1.0.x one-window key an agent writes beside it for an upgrade)
eq "refused requests reached no window" \
	"reads:limit:v1:cert:svc-billing reads:limit:v1:jwt:ACC-K reads:limit:v1:key:ACC-K reads:limit:v1:{cert:svc-billing}:1m reads:limit:v1:{jwt:ACC-K}:1m reads:limit:v1:{key:ACC-K}:1m" \
	"$(rcli keys 'reads:*' | sort | xargs)"
t_done
