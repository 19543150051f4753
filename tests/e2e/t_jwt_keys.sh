#!/usr/bin/env bash
# Signing keys chosen by the token's kid (RL_JWT_KEY<n>, RL_JWT_KID<n>,
# RL_JWT_ALG<n>), and a key rotation end to end, as docs/integrate.md tells
# it: add the new key (reload) -> the identity provider signs with it ->
# remove the old key (reload). Real HAProxy, keys made here with openssl.
. "$(dirname "$0")/../lib.sh"
t_setup
J=$ROOT/tools/jwt.sh
for k in old new other; do "$J" keygen "$T/$k" >/dev/null; done
"$J" keygen "$T/ec" --ec >/dev/null
"$J" keygen "$T/ec-other" --ec >/dev/null

# mint KEYDIR KID [jwt.sh mint options]: a token for ACC-K signed by KEYDIR's
# private key ("" KID: no kid in the header).
mint() {
	local dir=$1 kid=$2; shift 2
	local k=(); [ -n "$kid" ] && k=(--kid "$kid")
	"$J" mint --key "$T/$dir/jwt-private.pem" --sub ACC-K "${k[@]}" "$@"
}
# expect WHAT STATUS [DETAIL] TOKEN: one request on a limited route.
expect() {
	local what=$1 status=$2 detail=$3 tok=$4
	req A GET /accounts/ACC-K "$tok"
	eq "$what: $status" "$status" "$RSP_STATUS"
	[ -z "$detail" ] || eq "$what: why" "$detail" "$(jq -r .detail "$T/rsp.body")"
}
# keys LINES: replace the key settings HAProxy A starts with (kept in its env
# file, which a reload reads again).
keys() {
	sed -i '/RL_JWT_KEY\|RL_JWT_KID\|RL_JWT_ALG/d' "$T/haproxy-A.env"
	printf '%s\n' "$@" >> "$T/haproxy-A.env"
}
reload() {
	reload_haproxy A
	check "reload: the old process hands over and exits" wait_gone "$HAP_OLD_PID" 40
}

# The keys HAProxy reads come the way an identity provider publishes them: a
# JWK (RSA n/e, EC x/y, as its JWKS has them) turned into PEM by
# tools/jwt.sh jwk2pem.
# shellcheck disable=SC2059
b64hex() { printf "$(sed 's/../\\x&/g' <<<"$1")" | openssl base64 -A | tr '+/' '-_' | tr -d '='; }
rsa_jwk() {
	printf '{"kty":"RSA","kid":"%s","use":"sig","n":"%s","e":"AQAB"}' "$2" \
		"$(b64hex "$(openssl rsa -pubin -in "$T/$1/jwt-public.pem" -modulus -noout | cut -d= -f2)")"
}
ec_jwk() {
	local xy
	xy=$(openssl pkey -pubin -in "$T/$1/jwt-public.pem" -outform DER | od -An -v -tx1 | tr -d ' \n' | tail -c 128)
	printf '{"kty":"EC","crv":"P-256","kid":"%s","x":"%s","y":"%s"}' "$2" "$(b64hex "${xy:0:64}")" "$(b64hex "${xy:64:64}")"
}
printf '{"keys":[%s,%s,%s]}' "$(rsa_jwk old 2026-01)" "$(rsa_jwk new 2026-07)" "$(ec_jwk ec ec-1)" > "$T/jwks.json"
mkdir -p "$T/pem"
for kid in 2026-01 2026-07 ec-1; do
	jq --arg k "$kid" '.keys[] | select(.kid == $k)' "$T/jwks.json" | "$J" jwk2pem > "$T/pem/$kid.pem"
done
same_key() { cmp -s <(openssl pkey -pubin -in "$1" -outform DER) <(openssl pkey -pubin -in "$2" -outform DER); }
check "jwk2pem: the RSA JWK gives back its key" same_key "$T/pem/2026-07.pem" "$T/new/jwt-public.pem"
check "jwk2pem: the EC JWK gives back its key" same_key "$T/pem/ec-1.pem" "$T/ec/jwt-public.pem"
check "jwk2pem: a symmetric JWK is refused" test "$(echo '{"kty":"oct","k":"c2VjcmV0"}' | "$J" jwk2pem 2>/dev/null; echo $?)" = 2

# --- Before the rotation: one key, kid "2026-01" ----------------------------
export RL_JWT_KEY1=$T/pem/2026-01.pem RL_JWT_KID1=2026-01
start_edge A
unset RL_JWT_KEY1 RL_JWT_KID1
old=$(mint old 2026-01)
expect "one key: its kid" 200 "" "$old"
eq "one key: the account is the sub" ACC-K "$(jq -r .account "$T/rsp.body")"
expect "one key: a token without kid" 200 "" "$(mint old "")"
expect "one key: an unknown kid" 401 unknown-key "$(mint old 2026-99)"
expect "one key: RL_JWT_PUBKEY is no longer read" 401 invalid-signature \
	"$("$J" mint --key "$T/jwt/jwt-private.pem" --sub ACC-K)"

# --- Step 1: add the new key (RSA "2026-07") and an ES256 key; reload -------
keys "export RL_JWT_KEY1=$T/pem/2026-01.pem RL_JWT_KID1=2026-01" \
	"export RL_JWT_KEY2=$T/pem/2026-07.pem RL_JWT_KID2=2026-07" \
	"export RL_JWT_KEY3=$T/pem/ec-1.pem RL_JWT_KID3=ec-1 RL_JWT_ALG3=ES256"
reload
expect "overlap: the old key's token" 200 "" "$old"
expect "overlap: a new token from the old key" 200 "" "$(mint old 2026-01)"
expect "overlap: the new key's token" 200 "" "$(mint new 2026-07)"
expect "overlap: an ES256 token" 200 "" "$(mint ec ec-1 --alg ES256)"
expect "overlap: a token without kid (three keys)" 401 missing-kid "$(mint new "")"
expect "overlap: an unknown kid" 401 unknown-key "$(mint new 2026-99)"
# The kid names a key, the signature is another key's.
expect "kid of the new key, signed by the old one" 401 invalid-signature "$(mint old 2026-07)"
expect "kid of the old key, signed by the new one" 401 invalid-signature "$(mint new 2026-01)"
expect "kid of the old key, signed by a stranger" 401 invalid-signature "$(mint other 2026-01)"
expect "ES256 kid, signed by another EC key" 401 invalid-signature "$(mint ec-other ec-1 --alg ES256)"
# The key's algorithm, never the token's: an RSA key's kid with ES256, an EC
# key's kid with RS256.
expect "ES256 token naming an RS256 key" 401 unknown-key "$(mint ec 2026-07 --alg ES256)"
expect "RS256 token naming an ES256 key" 401 unknown-key "$(mint new ec-1)"
# Algorithm confusion: the public key as an HMAC secret, or no signature.
expect "HS256 keyed with the public key, kid of that key" 401 algorithm-not-allowed \
	"$("$J" mint --alg HS256 --key "$(cat "$T/new/jwt-public.pem")" --sub ACC-K --kid 2026-07)"
expect "alg none with a known kid" 401 algorithm-not-allowed "$("$J" mint --alg none --sub ACC-K --kid 2026-07)"
expect "the payload changed after signing" 401 invalid-signature "$(mint new 2026-07 --tamper)"

# --- Step 2: the identity provider signs with the new key; the old one goes -
keys "export RL_JWT_KEY2=$T/pem/2026-07.pem RL_JWT_KID2=2026-07" \
	"export RL_JWT_KEY3=$T/pem/ec-1.pem RL_JWT_KID3=ec-1 RL_JWT_ALG3=ES256"
reload
expect "after removal: the old key's token" 401 unknown-key "$old"
expect "after removal: a fresh token from the old key" 401 unknown-key "$(mint old 2026-01)"
expect "after removal: the new key's token" 200 "" "$(mint new 2026-07)"
expect "after removal: the ES256 key's token" 200 "" "$(mint ec ec-1 --alg ES256)"

# --- One key left (slot 2): a token without kid is accepted again -----------
keys "export RL_JWT_KEY2=$T/pem/2026-07.pem RL_JWT_KID2=2026-07"
reload
expect "only the new key: a token without kid" 200 "" "$(mint new "")"
expect "only the new key: the ES256 key is gone" 401 unknown-key "$(mint ec ec-1 --alg ES256)"

# --- PS256: HAProxy 2.8+ verifies it; 2.6 refuses such a key at start-up ---
if "$HAPROXY" -cc 'version_atleast(2.8)' 2>/dev/null; then
	keys "export RL_JWT_KEY1=$T/new/jwt-public.pem RL_JWT_KID1=2026-07" \
		"export RL_JWT_KEY2=$T/other/jwt-public.pem RL_JWT_KID2=ps-1 RL_JWT_ALG2=PS256"
	reload
	expect "PS256 key: its token" 200 "" "$(mint other ps-1 --alg PS256)"
	expect "PS256 key: an RS256 token with its kid" 401 unknown-key "$(mint other ps-1)"
else
	out=$(env RL_HAPROXY_DIR="$ROOT/haproxy" RL_ADMIN_SOCK="$T/c.sock" RL_JWT_KEY1="$T/other/jwt-public.pem" \
		RL_JWT_KID1=ps-1 RL_JWT_ALG1=PS256 "$HAPROXY" -c -f "$ROOT/haproxy/haproxy.cfg" 2>&1); rc=$?
	check "PS256 before 2.8: haproxy -c fails" test "$rc" -ne 0
	check "PS256 before 2.8: HAProxy says why" grep -q 'RSASSA-PSS' <<<"$out"
fi

# --- Mistakes that stop HAProxy at start-up ---------------------------------
# hcheck VAR=VALUE... [-- HAPROXY-ARGS...]: haproxy -c of the demo edge with those settings.
hcheck() {
	local vars=() args=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
	[ $# -gt 0 ] && shift && args=("$@")
	env RL_HAPROXY_DIR="$ROOT/haproxy" RL_ADMIN_SOCK="$T/c.sock" "${vars[@]}" "$HAPROXY" -c "${args[@]}" -f "$ROOT/haproxy/haproxy.cfg" 2>&1
}
out=$(hcheck RL_JWT_KEY1="$T/pem/2026-07.pem" RL_JWT_KID1=2026-07 RL_JWT_KEY3="$T/pem/ec-1.pem" RL_JWT_KID3=ec-1 \
	RL_JWT_ALG3=ES256 RL_JWT_LEEWAY=30 -- -dW); rc=$?
eq "keys by kid, issuer, audience, leeway: haproxy -c -dW passes" 0 "$rc"
eq "keys by kid, issuer, audience, leeway: no warning" "" "$(grep -v 'Configuration file is valid\|version is\|path to executable' <<<"$out")"
out=$(hcheck RL_JWT_KEY1="$T/new/jwt-public.pem"); rc=$?
check "a key without its kid: haproxy -c fails" test "$rc" -ne 0
check "a key without its kid: named" grep -q 'RL_JWT_KID' <<<"$out"
out=$(hcheck RL_JWT_KEY1="$T/new/jwt-public.pem" RL_JWT_KID1=a RL_JWT_ALG1=HS256); rc=$?
check "RL_JWT_ALG1=HS256: haproxy -c fails" test "$rc" -ne 0
check "RL_JWT_ALG1=HS256: named" grep -q 'RL_JWT_ALG' <<<"$out"

# (its window's key, and the 1.0.x one-window key an agent writes beside it for an upgrade)
eq "refused tokens reached no window but ACC-K's" "reads:limit:v1:jwt:ACC-K reads:limit:v1:{jwt:ACC-K}:1m" \
	"$(rcli keys '*' | sort | xargs)"
t_done
