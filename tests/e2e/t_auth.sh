#!/usr/bin/env bash
# Identity: every request without a valid RS256 JWT gets 401 with a problem
# body, and never reaches the agent (no Redis key) or a backend (no log line).
# The demo edge checks iss and aud (haproxy.cfg presets them) and allows
# RL_JWT_LEEWAY (60 s) of clock skew on exp and nbf.
. "$(dirname "$0")/../lib.sh"
t_setup
start_edge A

"$ROOT/tools/jwt.sh" keygen "$T/other" >/dev/null
# (a case minted here is sent seconds later on a loaded machine: the leeway
# cases near its 60 s edge read the clock when they mint)
now=$(date +%s)
J=$ROOT/tools/jwt.sh
key=$T/jwt/jwt-private.pem

# name|token ("" = no Authorization header at all)
cases=(
	"no token|"
	"not a JWT|abc"
	"three garbage parts|abc.def.ghi"
	"signed by another key|$($J mint --key "$T/other/jwt-private.pem" --sub ACC-EVIL)"
	"payload changed after signing|$($J mint --key "$key" --sub ACC-EVIL --tamper)"
	"HS256 (algorithm not allowed)|$($J mint --alg HS256 --key secret --sub ACC-EVIL)"
	"HS256 keyed with the public key (alg confusion)|$($J mint --alg HS256 --key "$(cat "$RL_JWT_PUBKEY")" --sub ACC-EVIL)"
	"alg none|$($J mint --alg none --sub ACC-EVIL)"
	"expired beyond the leeway|$($J mint --key "$key" --sub ACC-EVIL --exp $((now - 90)))"
	"no exp claim|$($J mint --key "$key" --sub ACC-EVIL --no-exp)"
	"not valid before a future nbf|$($J mint --key "$key" --sub ACC-EVIL --nbf $((now + 600)))"
	"nbf beyond the leeway|$($J mint --key "$key" --sub ACC-EVIL --nbf $((now + 300)))"
	# another issuer, or a token minted for another API by the same issuer
	"another issuer|$($J mint --key "$key" --sub ACC-EVIL --iss https://idp.other.example)"
	"no iss claim|$($J mint --key "$key" --sub ACC-EVIL --no-iss)"
	"another audience|$($J mint --key "$key" --sub ACC-EVIL --aud other-api)"
	"an audience array without ours|$($J mint --key "$key" --sub ACC-EVIL --aud-json '["other-api","billing"]')"
	"our audience inside another element|$($J mint --key "$key" --sub ACC-EVIL --aud-json '["x\",\"ratelimit-spoa-demo-api"]')"
	"our audience only nested|$($J mint --key "$key" --sub ACC-EVIL --aud other-api --claims '"ext":{"aud":"ratelimit-spoa-demo-api"}')"
	"aud a string that spells an array holding ours|$($J mint --key "$key" --sub ACC-EVIL --aud '["ratelimit-spoa-demo-api"]')"
	"a long aud array, ours only inside an element|$($J mint --key "$key" --sub ACC-EVIL --aud-json '["a","b","c","d","x|\"ratelimit-spoa-demo-api\"|y"]')"
	"aud a prefix of ours|$($J mint --key "$key" --sub ACC-EVIL --aud ratelimit-spoa-demo)"
	"no aud claim|$($J mint --key "$key" --sub ACC-EVIL --no-aud)"
	"no sub claim|$($J mint --key "$key" --no-sub)"
	"sub outside the account alphabet|$($J mint --key "$key" --sub 'ACC EVIL')"
	# a sub that is not a JSON string is no account (jwt_payload_query would
	# read true as "1" and 12345 as "12345")
	"sub true|$($J mint --key "$key" --sub-json true)"
	"sub 12345|$($J mint --key "$key" --sub-json 12345)"
	"sub 1.5|$($J mint --key "$key" --sub-json 1.5)"
	"sub an object|$($J mint --key "$key" --sub-json '{"id":"ACC-EVIL"}')"
	"sub an array|$($J mint --key "$key" --sub-json '["ACC-EVIL"]')"
	"sub null|$($J mint --key "$key" --sub-json null)"
	"sub false|$($J mint --key "$key" --sub-json false)"
	# only the top-level sub counts, never one nested in another claim
	"sub 12345 with a nested string sub|$($J mint --key "$key" --no-sub --claims '"sub":12345,"ctx":{"sub":"ACC-EVIL"}')"
	"nested string sub first, sub 12345|$($J mint --key "$key" --no-sub --claims '"ctx":{"sub":"ACC-EVIL"},"sub":12345')"
	"sub true with a nested string sub|$($J mint --key "$key" --no-sub --claims '"sub":true,"x":{"sub":"y"}')"
	"sub null with a nested string sub|$($J mint --key "$key" --no-sub --claims '"sub":null,"act":{"sub":"ACC-EVIL"}')"
	"sub an array with a nested string sub|$($J mint --key "$key" --no-sub --claims '"sub":["ACC-EVIL"],"act":{"sub":"ACC-EVIL"}')"
	"no top-level sub, one in act|$($J mint --key "$key" --no-sub --claims '"act":{"sub":"ACC-EVIL"}')"
	# two Authorization headers: HAProxy verifies the first only
	"a second Authorization header|$(mint_token ACC-1001)|$($J mint --alg none --sub ACC-EVIL)"
)

for c in "${cases[@]}"; do
	IFS='|' read -r name tok tok2 <<<"$c"
	extra=()
	[ -n "$tok2" ] && extra=(-H "Authorization: Bearer $tok2")
	for route in "POST /transfers" "GET /accounts/ACC-EVIL"; do
		req A "${route% *}" "${route#* }" "$tok" "${extra[@]}"
		eq "$name, $route: 401" 401 "$RSP_STATUS"
		eq "$name, $route: problem+json" application/problem+json "$(rsp_hdr Content-Type)"
		check "$name, $route: WWW-Authenticate Bearer" grep -q '^Bearer ' <<<"$(rsp_hdr WWW-Authenticate)"
		eq "$name, $route: no RateLimit header" "" "$(rsp_hdr RateLimit-Limit)"
	done
done
eq "the 401's challenge, exactly" 'Bearer realm="api", error="invalid_token"' "$(rsp_hdr WWW-Authenticate)"
eq "true as sub is an invalid subject" invalid-subject \
	"$(req A POST /transfers "$($J mint --key "$key" --sub-json true)"; jq -r .detail "$T/rsp.body")"
eq "two Authorization headers are refused as such" multiple-authorization-headers \
	"$(req A POST /transfers "$(mint_token ACC-1001)" -H "Authorization: Bearer x"; jq -r .detail "$T/rsp.body")"

# Basic credentials are not a bearer token.
req A POST /transfers "" -H "Authorization: Basic QUNDLUVWSUw6eA=="
eq "Basic auth: 401" 401 "$RSP_STATUS"
eq "401 body says why" missing-bearer-token "$(jq -r .detail "$T/rsp.body")"

eq "nothing unauthenticated reached the agent (Redis is empty)" 0 "$(counted_keys)"
eq "nothing unauthenticated reached a backend" 0 "$(grep -c 'account=ACC-EVIL' "$T/backend.log")"

# Clock skew: up to RL_JWT_LEEWAY (60 s) past exp or before nbf still passes.
req A GET /accounts/ACC-SKEW "$($J mint --key "$key" --sub ACC-SKEW --exp $(($(date +%s) - 30)))"
eq "expired 30 s ago (within the leeway): 200" 200 "$RSP_STATUS"
req A GET /accounts/ACC-SKEW "$($J mint --key "$key" --sub ACC-SKEW --nbf $(($(date +%s) + 30)))"
eq "nbf 30 s ahead (within the leeway): 200" 200 "$RSP_STATUS"
# aud: a string equal to ours, or an array with ours among its elements.
req A GET /accounts/ACC-AUD "$($J mint --key "$key" --sub ACC-AUD --aud-json '["billing", "ratelimit-spoa-demo-api"]')"
eq "aud array containing ours: 200" 200 "$RSP_STATUS"
req A GET /accounts/ACC-AUD "$($J mint --key "$key" --sub ACC-AUD --aud-json '["a","b","c","ratelimit-spoa-demo-api"]')"
eq "aud array with ours fourth: 200" 200 "$RSP_STATUS"
req A GET /accounts/ACC-AUD "$($J mint --key "$key" --sub ACC-AUD --aud-json '["a","ratelimit\u002dspoa-demo-api"]')"
eq "aud array holding ours spelled with a JSON escape: 200" 200 "$RSP_STATUS"
# Past the fourth element only HAProxy 2.9+ reads the array (2.6's json_query
# returns no arrays: the block reads the first four elements one by one).
req A GET /accounts/ACC-AUD "$($J mint --key "$key" --sub ACC-AUD --aud-json '["a","b","c","d","ratelimit-spoa-demo-api"]')"
if "$HAPROXY" -cc 'version_atleast(2.9)' 2>/dev/null; then
	eq "aud array with ours fifth: 200 on 2.9+" 200 "$RSP_STATUS"
else
	eq "aud array with ours fifth: 401 before 2.9" 401 "$RSP_STATUS"
	eq "aud array with ours fifth: why" invalid-audience "$(jq -r .detail "$T/rsp.body")"
fi
# RFC 8693 act: the nested sub is the actor, the top-level sub the account.
req A GET /accounts/ACC-TOP "$($J mint --key "$key" --sub ACC-TOP --claims '"act":{"sub":"svc-actor"}')"
eq "act with a nested sub: 200" 200 "$RSP_STATUS"
eq "act with a nested sub: the account is the top-level sub" ACC-TOP "$(jq -r .account "$T/rsp.body")"
req A GET /accounts/ACC-TOP "$($J mint --key "$key" --no-sub --claims '"act":{"sub":"svc-actor"},"sub":"ACC-TOP"')"
eq "act first, then the top-level sub: the account is the top-level sub" ACC-TOP "$(jq -r .account "$T/rsp.body")"
for c in "wrong iss|invalid-issuer|--iss https://idp.other.example" "wrong aud|invalid-audience|--aud other-api" \
	"expired beyond the leeway|token-expired|--exp $(($(date +%s) - 90))" "nbf beyond the leeway|token-not-yet-valid|--nbf $(($(date +%s) + 90))"; do
	IFS='|' read -r name why opts <<<"$c"
	# shellcheck disable=SC2086
	req A GET /accounts/ACC-EVIL "$($J mint --key "$key" --sub ACC-EVIL $opts)"
	eq "$name: why" "$why" "$(jq -r .detail "$T/rsp.body")"
done
req A GET /accounts/ACC-EVIL "$($J mint --key "$key" --no-sub --claims '"sub":12345,"ctx":{"sub":"x"}')"
eq "sub 12345 with a nested string sub: why" invalid-subject "$(jq -r .detail "$T/rsp.body")"

# The same path with a valid token does reach both, so the two checks above
# would have seen a leak.
req A POST /transfers "$(mint_token ACC-1001)"
eq "a valid token passes" 201 "$RSP_STATUS"
eq "the valid request was counted" 1 "$(rcli zcard transfer:limit:v1:jwt:ACC-1001)"
eq "the backend saw the verified account" 1 "$(grep -c 'account=ACC-1001' "$T/backend.log")"

# A client cannot choose its account with a header, under any spelling: the
# backend echoes the header block it received. WSGI-style servers fold "_"
# into "-", so X_Account would merge into X-Account there.
for spelling in X-Account x-account X_Account x_account X_ACCOUNT X-ACCOUNT; do
	req A GET /accounts/ACC-1001 "$(mint_token ACC-1001)" -H "$spelling: VICTIM" -H "X_Account: VICTIM2"
	eq "$spelling: the request passes" 200 "$RSP_STATUS"
	eq "$spelling: X-Account is the verified account" ACC-1001 "$(jq -r .account "$T/rsp.body")"
	hdrs=$(jq -r .headers "$T/rsp.body")
	eq "$spelling: no attacker value reached the backend" "" "$(grep -i victim <<<"$hdrs")"
	eq "$spelling: exactly one identity header reached the backend" 1 "$(grep -ci '^x.account:' <<<"$hdrs")"
done
# The "_" spellings of the headers the limiter sets or reads are dropped;
# other names with "_" reach the backend as sent.
req A POST /transfers "$(mint_token ACC-1001)" -H "Foo_Bar: x" -H "X_API_Key: pk-x" -H "X-API_Key: pk-y" \
	-H "x_api-key: pk-z" -H "X_Forwarded_For: 192.0.2.1" -H "X-Forwarded_For: 192.0.2.2"
hdrs=$(jq -r .headers "$T/rsp.body" | tr -d "\r")
eq "a header name with _ that is no limiter header reaches the backend" "foo_bar: x" "$(grep -i '^foo_bar:' <<<"$hdrs")"
eq "no _ spelling of X-API-Key reaches the backend" "" "$(grep -i '^x.api.key:' <<<"$hdrs")"
eq "no _ spelling of X-Forwarded-For reaches the backend" "" "$(grep -i '^x.forwarded.for:' <<<"$hdrs")"
t_done
