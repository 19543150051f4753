#!/usr/bin/env bash
# Every route of the shipped haproxy/routes.map, asked with the methods its
# line does not name: HEAD (which backends serve as GET), OPTIONS and an
# unknown method (FOO). None of them is a way around the route's identity:
#   without credentials  401, nothing reaches Redis or a backend;
#   with the route's identity  the route's policy decides and counts it
#   (RateLimit-Policy names it, a window for the account exists in Redis),
#   and HEAD on a GET route reaches the backend as GET does.
# The identity is the one the line names: a JWT, an API key (a map made
# here) or a client certificate over the mutual-TLS listener.
# Then the same paths spelled as a backend may read them ("//", "..",
# "%61"): the demo edge refuses them before the block.
. "$(dirname "$0")/../lib.sh"
t_setup

mkdir -p "$T/pki"
pki() {   # pki NAME [CA]: a certificate for CN=NAME, self-signed or signed by CA
	local d=$T/pki
	if [ $# -eq 1 ]; then
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
			-subj "/CN=$1" -keyout "$d/$1.key" -out "$d/$1.pem" 2>/dev/null
	else
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
			-keyout "$d/$1.key" -out "$d/$1.csr" 2>/dev/null
		openssl x509 -req -in "$d/$1.csr" -CA "$d/$2.pem" -CAkey "$d/$2.key" -CAcreateserial \
			-days 2 -out "$d/$1.pem" 2>/dev/null
	fi
}
pki client-ca; pki edge-server
cat "$T/pki/edge-server.pem" "$T/pki/edge-server.key" > "$T/pki/edge-server.bundle"
: > "$T/apikeys.map"
TLS_PORT=$(free_port)
export RL_APIKEYS_MAP=$T/apikeys.map
export RL_TLS_BIND=127.0.0.1:$TLS_PORT RL_TLS_CERT=$T/pki/edge-server.bundle RL_TLS_CA=$T/pki/client-ca.pem

# One account per probe, so no probe meets another's window. The lines with
# an identity of a caller's own (jwt, key, cert): not the exempt ("-") ones,
# nor the address-counted default (tests/e2e/t_routes.sh asks those).
routes=$(sed -e 's/#.*//' "$ROOT/haproxy/routes.map" | awk 'NF >= 2 && $2 != "-" && $3 !~ /(^|\|)ip$/')
n=0
while read -r key _ id _; do
	for m in HEAD OPTIONS FOO; do
		n=$((n + 1))
		case ${id:-jwt} in
		key) printf 'pk-probe-%s ACC-M%s\n' "$n" "$n" >> "$T/apikeys.map" ;;
		cert) pki "svc-m$n" client-ca ;;
		esac
	done
done <<<"$routes"
start_edge A || { fail "the edge did not start"; t_done; exit 1; }
eq "the routes map has lines to probe" 1 "$([ "$n" -ge 9 ] && echo 1)"

# probe METHOD URL [curl args]: RSP_STATUS, $T/rsp.hdr (HEAD with -I: no body to wait for)
probe() {
	local m=$1 url=$2 how=(-X "$1"); shift 2
	[ "$m" = HEAD ] && how=(-I)
	RSP_STATUS=$(curl -s -m 10 -k "${how[@]}" "$@" -D "$T/rsp.hdr" -o "$T/rsp.body" \
		-w '%{http_code}' "$url")
}

n=0
while read -r key policy id _; do
	id=${id:-jwt}
	path=${key#*/}; path=/$path
	case $path in */) path=${path}x ;; esac
	for m in HEAD OPTIONS FOO; do
		n=$((n + 1))
		base=http://127.0.0.1:$HAP_PORT_A
		cred=()
		case $id in
		jwt) cred=(-H "Authorization: Bearer $(mint_token "ACC-M$n")") acct=ACC-M$n ;;
		key) cred=(-H "X-API-Key: pk-probe-$n") acct=ACC-M$n ;;
		cert) base=https://127.0.0.1:$TLS_PORT acct=svc-m$n
		      cred=(--cert "$T/pki/svc-m$n.pem" --key "$T/pki/svc-m$n.key") ;;
		esac
		what="$m $path ($key, $id)"

		keys=$(counted_keys)
		probe "$m" "$base$path?nocred-$n"
		eq "$what without credentials: 401" 401 "$RSP_STATUS"
		eq "$what without credentials: no RateLimit-Policy" "" "$(rsp_hdr RateLimit-Policy)"
		# (a 1s window of an earlier probe may expire meanwhile: never more keys)
		check "$what without credentials: nothing in Redis" test "$(counted_keys)" -le "$keys"

		probe "$m" "$base$path" "${cred[@]}"
		check "$what with credentials: not refused for identity ($RSP_STATUS)" test "$RSP_STATUS" != 401
		check "$what with credentials: the route's policy decided ($(rsp_hdr RateLimit-Policy))" \
			grep -q "^\"${policy}[\"-]" <<<"$(rsp_hdr RateLimit-Policy)"
		check "$what with credentials: counted in Redis for $id:$acct" \
			test -n "$(rcli --scan --pattern "$policy:*$id:$acct*")"
		if [ "$m" = HEAD ] && [ "${key%%/*}" = GET ]; then
			eq "$what with credentials: the backend answers as for GET" 200 "$RSP_STATUS"
		fi
	done
done <<<"$routes"
# The same paths under another spelling a backend may read as them: the demo
# edge refuses them before the route lookup (ratelimit-edge.cfg's rule).
# (%2561 is no route: the default line decides it, anonymously, by address:
# only an anon: key may appear.)
limited_keys() { rcli --scan | grep -vc '^anon:'; }
for p in //accounts/x /%61ccounts/x /x/../accounts/x /./accounts/x /accounts%2fx /%2561ccounts/x; do
	keys=$(limited_keys)
	RSP_STATUS=$(curl -s -m 10 --path-as-is -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HAP_PORT_A$p?nocred-$p")
	case $p in *%25*) want=404 ;; *) want=400 ;; esac   # %25 is "%": the default route, the demo's 404
	eq "GET $p: $want" "$want" "$RSP_STATUS"
	check "GET $p: nothing in Redis under a limited route's policy" test "$(limited_keys)" -le "$keys"
done
rule=$(grep -h "deny_status 400 if { path -m reg.*|2f|" "$ROOT/haproxy/ratelimit-edge.cfg" | head -1 | sed 's/^ *//')
check "ratelimit-edge.cfg has the canonical-path rule (%2F refused)" test -n "$rule"
check "the demo edge carries ratelimit-edge.cfg's canonical-path rule" grep -qF "$rule" "$ROOT/haproxy/haproxy.cfg"

# The backend logs each request it answers, query string included.
eq "no request without credentials reached a backend" "" "$(grep -o 'nocred-[0-9]*' "$T/backend.log" | xargs)"
t_done
