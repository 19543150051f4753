#!/usr/bin/env bash
# Identity: every request without a valid RS256 JWT gets 401 with a problem
# body, and never reaches the agent (no Redis key) or a backend (no log line).
. "$(dirname "$0")/../lib.sh"
t_setup
start_edge A

"$ROOT/tools/jwt.sh" keygen "$T/other" >/dev/null
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
	"expired|$($J mint --key "$key" --sub ACC-EVIL --exp $((now - 5)))"
	"no exp claim|$($J mint --key "$key" --sub ACC-EVIL --no-exp)"
	"not valid before a future nbf|$($J mint --key "$key" --sub ACC-EVIL --nbf $((now + 600)))"
	"no sub claim|$($J mint --key "$key" --no-sub)"
	"sub outside the account alphabet|$($J mint --key "$key" --sub 'ACC EVIL')"
)

for c in "${cases[@]}"; do
	name=${c%%|*}; tok=${c#*|}
	for route in "POST /transfers" "GET /accounts/ACC-EVIL"; do
		req A "${route% *}" "${route#* }" "$tok"
		eq "$name, $route: 401" 401 "$RSP_STATUS"
		eq "$name, $route: problem+json" application/problem+json "$(rsp_hdr Content-Type)"
		check "$name, $route: WWW-Authenticate Bearer" grep -q '^Bearer ' <<<"$(rsp_hdr WWW-Authenticate)"
		eq "$name, $route: no RateLimit header" "" "$(rsp_hdr RateLimit-Limit)"
	done
done

# Basic credentials are not a bearer token.
req A POST /transfers "" -H "Authorization: Basic QUNDLUVWSUw6eA=="
eq "Basic auth: 401" 401 "$RSP_STATUS"
eq "401 body says why" missing-bearer-token "$(jq -r .detail "$T/rsp.body")"

eq "nothing unauthenticated reached the agent (Redis is empty)" 0 "$(rcli dbsize)"
eq "nothing unauthenticated reached a backend" 0 "$(grep -c 'account=ACC-EVIL' "$T/backend.log")"

# The same path with a valid token does reach both, so the two checks above
# would have seen a leak.
req A POST /transfers "$(mint_token ACC-1001)"
eq "a valid token passes" 201 "$RSP_STATUS"
eq "the valid request was counted" 1 "$(rcli zcard transfer:limit:v1:ACC-1001)"
eq "the backend saw the verified account" 1 "$(grep -c 'account=ACC-1001' "$T/backend.log")"

# A client cannot choose its account with a header.
req A GET /accounts/ACC-1001 "$(mint_token ACC-1001)" -H "X-Account: ACC-EVIL"
eq "X-Account from the client is replaced" ACC-1001 "$(jq -r .account "$T/rsp.body")"
t_done
