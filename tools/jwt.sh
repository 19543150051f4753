#!/usr/bin/env bash
# jwt.sh - demo/test JSON Web Tokens with openssl only (no Python, no jq).
#
#   tools/jwt.sh keygen DIR [--ec]
#       Write a fresh RSA-2048 pair: DIR/jwt-private.pem (mode 600) and
#       DIR/jwt-public.pem (what HAProxy's jwt_verify reads, $RL_JWT_PUBKEY).
#       With --ec, a P-256 pair for ES256 instead ($RL_JWT_ES256_PUBKEY).
#       Keys are made at run time and never committed.
#
#   tools/jwt.sh mint --key FILE|SECRET --sub ACCOUNT [options]
#       Print a compact JWS on stdout. Options:
#         --alg RS256|ES256|PS256|HS256|none  signing algorithm (default RS256;
#                                  the edge accepts RS256 and ES256, PS256 on
#                                  HAProxy 2.8+; the others test the 401 path)
#         --kid KID                a kid in the JOSE header (default: none)
#         --iss ISSUER | --no-iss  iss claim (default ratelimit-spoa-demo)
#         --aud AUDIENCE | --aud-json JSON | --no-aud
#                                  aud claim (default ratelimit-spoa-demo-api);
#                                  --aud-json for an array: '["a","b"]'
#         --claims 'JSON MEMBERS'  more members, raw: '"act":{"sub":"x"}'
#         --ttl SECONDS            exp = now + SECONDS (default 3600; negative = expired)
#         --exp EPOCH | --no-exp   an absolute exp, or no exp claim at all
#         --nbf EPOCH              add a not-before claim
#         --no-sub                 leave the sub claim out (with --sub ignored)
#         --sub-json JSON          sub as raw JSON (true, 12345, {...}: the 401 path)
#         --tamper                 flip the payload after signing (bad signature)
#
#   tools/jwt.sh decode TOKEN      print header and payload JSON (no verification)
#
#   tools/jwt.sh jwk2pem < JWK     one public JWK (a JSON object: kty RSA with n
#       and e, or kty EC, crv P-256, with x and y) -> a PEM public key on
#       stdout, for RL_JWT_KEY<n>. Take the JWK from the provider's JWKS, e.g.
#       jq '.keys[] | select(.kid == "2026-07")' jwks.json | tools/jwt.sh jwk2pem
#
# Exit status: 0, or 2 with a message on stderr.
set -euo pipefail

die() { echo "jwt.sh: $*" >&2; exit 2; }

# b64url: stdin bytes -> base64url without padding (RFC 7515 section 2).
b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }

# b64url_decode STRING: base64url text -> bytes on stdout.
b64url_decode() {
	local s=${1//-/+}
	s=${s//_//}
	case $(( ${#s} % 4 )) in
	2) s="$s==" ;;
	3) s="$s=" ;;
	esac
	printf '%s' "$s" | openssl base64 -d -A
}

# json_str STRING: a JSON string literal. Accounts are plain identifiers; we
# still escape the two characters that would break the document.
json_str() {
	local s=${1//\\/\\\\}
	s=${s//\"/\\\"}
	printf '"%s"' "$s"
}

# der_to_jose: an ECDSA P-256 signature, DER on stdin -> r||s (64 bytes)
# base64url, as JWS wants it (RFC 7518 section 3.4).
der_to_jose() {
	local hex r s
	hex=$(od -An -v -tx1 | tr -d ' \n')
	# 30 len 02 rlen r 02 slen s (lengths < 128 for P-256)
	local rlen=$((16#${hex:6:2}))
	r=${hex:8:$((rlen * 2))}
	local rest=${hex:$((8 + rlen * 2))}
	local slen=$((16#${rest:2:2}))
	s=${rest:4:$((slen * 2))}
	pad64() { local v=$1; v=${v#00}; while [ ${#v} -lt 64 ]; do v="00$v"; done; printf '%s' "$v"; }
	# shellcheck disable=SC2059
	printf "$(printf '%s%s' "$(pad64 "$r")" "$(pad64 "$s")" | sed 's/../\\x&/g')" | b64url
}

cmd_keygen() {
	local dir=${1:?usage: jwt.sh keygen DIR [--ec]} opts=(-algorithm RSA -pkeyopt rsa_keygen_bits:2048)
	[ "${2:-}" = --ec ] && opts=(-algorithm EC -pkeyopt ec_paramgen_curve:P-256)
	mkdir -p "$dir"
	( umask 077; openssl genpkey "${opts[@]}" \
		-out "$dir/jwt-private.pem" 2>/dev/null ) || die "openssl genpkey failed"
	openssl pkey -in "$dir/jwt-private.pem" -pubout -out "$dir/jwt-public.pem" 2>/dev/null \
		|| die "openssl pkey -pubout failed"
	chmod 644 "$dir/jwt-public.pem"
	echo "$dir/jwt-public.pem"
}

cmd_mint() {
	local alg=RS256 key='' sub='' sub_json='' have_sub=1 ttl=3600 exp='' no_exp=0 nbf='' tamper=0
	local kid='' iss=ratelimit-spoa-demo aud_json='"ratelimit-spoa-demo-api"' claims=''
	while [ $# -gt 0 ]; do
		case $1 in
		--alg) alg=${2:?}; shift 2 ;;
		--key) key=${2:?}; shift 2 ;;
		--sub) sub=${2:?}; shift 2 ;;
		--no-sub) have_sub=0; shift ;;
		--sub-json) sub_json=${2:?}; shift 2 ;;
		--ttl) ttl=${2:?}; shift 2 ;;
		--exp) exp=${2:?}; shift 2 ;;
		--no-exp) no_exp=1; shift ;;
		--nbf) nbf=${2:?}; shift 2 ;;
		--tamper) tamper=1; shift ;;
		--kid) kid=${2?}; shift 2 ;;
		--iss) iss=${2:?}; shift 2 ;;
		--no-iss) iss=''; shift ;;
		--aud) aud_json=$(json_str "${2:?}"); shift 2 ;;
		--aud-json) aud_json=${2:?}; shift 2 ;;
		--no-aud) aud_json=''; shift ;;
		--claims) claims=${2:?}; shift 2 ;;
		*) die "unknown option: $1" ;;
		esac
	done
	[ $have_sub = 0 ] || [ -n "$sub" ] || [ -n "$sub_json" ] || die "--sub ACCOUNT is required"
	[ "$alg" = none ] || [ -n "$key" ] || die "--key is required for $alg"
	local now header payload signing sig
	now=$(date +%s)
	[ -n "$exp" ] || exp=$((now + ttl))
	if [ -n "$kid" ]; then
		header=$(printf '{"alg":"%s","typ":"JWT","kid":%s}' "$alg" "$(json_str "$kid")" | b64url)
	else
		header=$(printf '{"alg":"%s","typ":"JWT"}' "$alg" | b64url)
	fi
	payload="{\"iat\":$now"
	[ -z "$iss" ] || payload="$payload,\"iss\":$(json_str "$iss")"
	[ -z "$aud_json" ] || payload="$payload,\"aud\":$aud_json"
	[ -z "$claims" ] || payload="$payload,$claims"
	if [ -n "$sub_json" ]; then
		payload="$payload,\"sub\":$sub_json"
	elif [ $have_sub = 1 ]; then
		payload="$payload,\"sub\":$(json_str "$sub")"
	fi
	[ $no_exp = 1 ] || payload="$payload,\"exp\":$exp"
	[ -z "$nbf" ] || payload="$payload,\"nbf\":$nbf"
	payload=$(printf '%s}' "$payload" | b64url)
	signing="$header.$payload"
	case $alg in
	RS256)
		[ -r "$key" ] || die "cannot read private key $key"
		sig=$(printf '%s' "$signing" | openssl dgst -sha256 -sign "$key" -binary | b64url) ;;
	ES256)
		[ -r "$key" ] || die "cannot read private key $key"
		sig=$(printf '%s' "$signing" | openssl dgst -sha256 -sign "$key" -binary | der_to_jose) ;;
	PS256)
		[ -r "$key" ] || die "cannot read private key $key"
		sig=$(printf '%s' "$signing" | openssl dgst -sha256 -sign "$key" -sigopt rsa_padding_mode:pss \
			-sigopt rsa_pss_saltlen:32 -binary | b64url) ;;
	HS256)
		sig=$(printf '%s' "$signing" | openssl dgst -sha256 -hmac "$key" -binary | b64url) ;;
	none)
		sig= ;;
	*) die "unsupported --alg $alg (RS256, ES256, PS256, HS256 or none)" ;;
	esac
	if [ $tamper = 1 ]; then
		# Same shape, different claims: a valid-looking token whose signature
		# no longer matches.
		payload=$(printf '{"sub":"ACC-9999","exp":%s}' "$exp" | b64url)
		signing="$header.$payload"
	fi
	printf '%s.%s\n' "$signing" "$sig"
}

# jwk_member NAME: the string value of member NAME of the JWK in $jwk
# (base64url and names need no JSON unescaping).
jwk_member() {
	printf '%s' "$jwk" | tr -d '\n' | sed -n 's/.*"'"$1"'"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p'
}

# b64url_hex STRING: base64url text -> hex digits.
b64url_hex() { b64url_decode "$1" | od -An -v -tx1 | tr -d ' \n'; }

cmd_jwk2pem() {
	local jwk kty d
	jwk=$(cat)
	kty=$(jwk_member kty)
	d=$(mktemp -d) || die "mktemp failed"
	# shellcheck disable=SC2064
	trap "rm -rf '$d'" EXIT
	case $kty in
	RSA)
		local n e
		n=$(b64url_hex "$(jwk_member n)"); e=$(b64url_hex "$(jwk_member e)")
		[ -n "$n" ] && [ -n "$e" ] || die "an RSA JWK needs n and e"
		printf 'asn1=SEQUENCE:k\n[k]\nn=INTEGER:0x%s\ne=INTEGER:0x%s\n' "$n" "$e" > "$d/k.cnf"
		openssl asn1parse -genconf "$d/k.cnf" -out "$d/k.der" -noout >/dev/null 2>&1 \
			&& openssl rsa -RSAPublicKey_in -inform DER -in "$d/k.der" -pubout 2>/dev/null \
			|| die "openssl could not build the RSA key" ;;
	EC)
		local x y
		[ "$(jwk_member crv)" = P-256 ] || die "only the P-256 curve (ES256) is supported"
		x=$(b64url_hex "$(jwk_member x)"); y=$(b64url_hex "$(jwk_member y)")
		[ ${#x} = 64 ] && [ ${#y} = 64 ] || die "an EC P-256 JWK needs 32-byte x and y"
		printf 'asn1=SEQUENCE:spki\n[spki]\nalg=SEQUENCE:alg\nkey=FORMAT:HEX,BITSTRING:04%s%s\n[alg]\nt=OID:id-ecPublicKey\nc=OID:prime256v1\n' \
			"$x" "$y" > "$d/k.cnf"
		openssl asn1parse -genconf "$d/k.cnf" -out "$d/k.der" -noout >/dev/null 2>&1 \
			&& openssl pkey -pubin -inform DER -in "$d/k.der" 2>/dev/null \
			|| die "openssl could not build the EC key" ;;
	*) die "unsupported JWK kty '$kty' (RSA or EC)" ;;
	esac
}

cmd_decode() {
	local tok=${1:?usage: jwt.sh decode TOKEN} h p
	IFS=. read -r h p _ <<<"$tok"
	b64url_decode "$h"; echo
	b64url_decode "$p"; echo
}

case ${1:-} in
keygen) shift; cmd_keygen "$@" ;;
mint) shift; cmd_mint "$@" ;;
decode) shift; cmd_decode "$@" ;;
jwk2pem) shift; cmd_jwk2pem "$@" ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
