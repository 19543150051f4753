#!/usr/bin/env bash
# Keys from the identity provider: ratelimit-jwks fetches a JWKS over https
# (loopback, a CA made here), writes kid.map (RL_JWKS_MAP) and keys.cfg
# (loaded with -f), and reloads HAProxy (master-worker, SIGUSR2, as
# systemctl reload does) only when they changed. Under a bounded load of
# valid tokens signed by the old key, a new kid is published and the command
# run: every response of the load is 201 (no request dropped, no 401), and
# tokens of the new kid pass after the run. Then the old key is withdrawn.
. "$(dirname "$0")/../lib.sh"
t_setup
J=$ROOT/tools/jwt.sh
# The command under test: the tree's, or an installed one (tools/deb-test.sh:
# RATELIMIT_JWKS=/usr/sbin/ratelimit-jwks).
JWKS=${RATELIMIT_JWKS:-$ROOT/tools/ratelimit-jwks}
for k in old new; do "$J" keygen "$T/$k" >/dev/null; done
"$J" keygen "$T/ec" --ec >/dev/null

# A CA and a server certificate for 127.0.0.1 (EC P-256: quick to make).
tls() {
	local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
	openssl req -x509 "${ec[@]}" -keyout "$T/ca.key" -out "$T/ca.pem" -days 2 -subj /CN=jwks-test-ca &&
	openssl req -x509 "${ec[@]}" -keyout "$T/other-ca.key" -out "$T/other-ca.pem" -days 2 -subj /CN=other &&
	openssl req -new "${ec[@]}" -keyout "$T/srv.key" -out "$T/srv.csr" -subj /CN=idp &&
	printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > "$T/srv.ext" &&
	openssl x509 -req -in "$T/srv.csr" -CA "$T/ca.pem" -CAkey "$T/ca.key" -CAcreateserial \
		-out "$T/srv.pem" -days 2 -extfile "$T/srv.ext"
}
tls >/dev/null 2>&1 || { fail "openssl made the test CA"; t_done; exit 1; }

# publish KEYDIR:KID...: the JWKS the identity provider serves from now on
# (written beside, renamed: the server never reads half a document).
publish() {
	python3 - "$T/jwks.json" "$@" <<-'PY'
	import base64, json, os, sys
	from cryptography.hazmat.primitives import serialization
	from cryptography.hazmat.primitives.asymmetric import ec
	b = lambda n, l=None: base64.urlsafe_b64encode(n.to_bytes(l or (n.bit_length() + 7) // 8, "big")).rstrip(b"=").decode()
	keys = []
	for arg in sys.argv[2:]:
	    d, kid = arg.split(":")
	    k = serialization.load_pem_public_key(open(os.path.join(os.path.dirname(sys.argv[1]), d, "jwt-public.pem"), "rb").read())
	    n = k.public_numbers()
	    if isinstance(k, ec.EllipticCurvePublicKey):
	        keys.append({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "x": b(n.x, 32), "y": b(n.y, 32)})
	    else:
	        keys.append({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": b(n.n), "e": b(n.e)})
	keys.append({"kty": "RSA", "kid": "enc-1", "use": "enc", "n": keys[0].get("n", "AQAB"), "e": "AQAB"})
	open(sys.argv[1] + ".new", "w").write(json.dumps({"keys": keys}))
	os.replace(sys.argv[1] + ".new", sys.argv[1])
	PY
}
publish old:2026-01

# The identity provider: the JWKS over https on loopback.
IDP_PORT=$(free_port)
python3 - "$T" "$IDP_PORT" >>"$T/idp.log" 2>&1 <<-'PY' &
import http.server, os, ssl, sys
d, port = sys.argv[1], int(sys.argv[2])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = open(os.path.join(d, "jwks.json"), "rb").read()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(os.path.join(d, "srv.pem"), os.path.join(d, "srv.key"))
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
PY
t_track $!
wait_port "$IDP_PORT" || fail "the JWKS server started"
URL=https://127.0.0.1:$IDP_PORT/.well-known/jwks.json

# jwks [ARGS]: one run of the command against the identity provider.
jwks() { "$JWKS" --source "$URL" --ca-file "$T/ca.pem" --dir "$T/jwks" "$@" >"$T/jwks.out" 2>&1; }
jwks --reload-cmd ''
eq "first run: exit 0" 0 $?
check "first run: the map names kid 2026-01" grep -q '^2026-01 RS256 ' "$T/jwks/kid.map"
check "first run: the encryption key is left out, and said" grep -q 'enc-1.*use' "$T/jwks.out"

start_redis
# A quota the load cannot exhaust: every answer below should be 201.
start_agent "$E2E_REDIS_TIMEOUT
policy transfer 100000/1m
policy reads    100/1m on-redis-error=allow"
start_backend
export RL_JWKS_MAP=$T/jwks/kid.map
start_haproxy A "$HAPROXY_FILES/haproxy.cfg" -f "$T/jwks/keys.cfg" -W
unset RL_JWKS_MAP
master=$HAP_PID_A

mint() { local d=$1 kid=$2; shift 2; local k=(); [ -n "$kid" ] && k=(--kid "$kid"); "$J" mint --key "$T/$d/jwt-private.pem" --sub ACC-J "${k[@]}" "$@"; }
expect() {
	local what=$1 status=$2 detail=$3 tok=$4
	req A POST /transfers "$tok"
	eq "$what: $status" "$status" "$RSP_STATUS"
	[ -z "$detail" ] || eq "$what: why" "$detail" "$(jq -r .detail "$T/rsp.body")"
}
old=$(mint old 2026-01)
expect "one key: its kid" 201 "" "$old"
expect "one key: a token without kid" 201 "" "$(mint old "")"
expect "one key: the next key's kid, not yet published" 401 unknown-key "$(mint new 2026-07)"
expect "a kid of \"*\" does not name the no-kid key" 401 unknown-key "$(mint old '*')"
expect "the old key's kid with HS256 keyed by its public key" 401 algorithm-not-allowed \
	"$("$J" mint --alg HS256 --key "$(cat "$T/old/jwt-public.pem")" --sub ACC-J --kid 2026-01)"
expect "the old kid, signed by another key" 401 invalid-signature "$(mint new 2026-01)"

# --- Rotation under load ----------------------------------------------------
# Client loops (load_start: bounded) with tokens of the old key throughout.
load_start POST "http://127.0.0.1:$HAP_PORT_A/transfers" "$old"
load_wait 20
w1=$(hap_workers "$master")
check "master-worker: one worker ($w1)" test -n "$w1"

publish old:2026-01 new:2026-07 ec:ec-1
jwks --reload-cmd "kill -USR2 $master"
eq "new kid published: exit 0" 0 $?
check "new kid published: reloaded" grep -q reloaded "$T/jwks.out"
check "new kid published: the map names it" grep -q '^2026-07 RS256 ' "$T/jwks/kid.map"
check "several keys: no line for tokens without kid" test -z "$(grep '^\*' "$T/jwks/kid.map")"
check "the reload replaced the worker" wait_new_worker "$master" "$w1"
before=$(wc -l < "$T/loop.out")
expect "after the run: the new kid passes" 201 "" "$(mint new 2026-07)"
expect "after the run: an ES256 kid passes" 201 "" "$(mint ec ec-1 --alg ES256)"
expect "after the run: the old kid still passes" 201 "" "$(mint old 2026-01)"
expect "several keys: a token without kid" 401 missing-kid "$(mint new "")"
expect "RS256 token naming the ES256 key" 401 unknown-key "$(mint new ec-1)"
w2=$(hap_workers "$master")
jwks --reload-cmd "kill -USR2 $master"
eq "same keys again: exit 0" 0 $?
check "same keys again: no reload" grep -q 'unchanged, no reload' "$T/jwks.out"
eq "same keys again: the same worker" "$w2" "$(hap_workers "$master")"
load_wait $((before + 20))
load_stop

total=$(wc -l < "$T/loop.out")
echo "# $total requests with the old key across the rotation: $(cut -d' ' -f1 "$T/loop.out" | sort | uniq -c | xargs)"
check "load ran before and after the reload ($total requests)" test "$total" -ge 40
eq "every request of the load answered 201 (none dropped, no 401)" 0 "$(grep -vc '^201 ' "$T/loop.out")"

# --- A document refused changes nothing ---------------------------------------
sum() { cat "$T/jwks/kid.map" "$T/jwks/keys.cfg" | md5sum; }
s=$(sum)
"$JWKS" --source "$URL" --ca-file "$T/other-ca.pem" --dir "$T/jwks" --reload-cmd "kill -USR2 $master" >"$T/jwks.out" 2>&1
eq "a CA that did not sign the IdP: exit 1" 1 $?
check "a CA that did not sign the IdP: refused" grep -q 'refused, nothing written' "$T/jwks.out"
echo '{"keys":[{"kty":"RSA","kid":"x","n":"!!","e":"AQAB"}]}' > "$T/jwks.json"
jwks --reload-cmd "kill -USR2 $master"
eq "a malformed key: exit 1" 1 $?
eq "refusals: the map and cfg unchanged" "$s" "$(sum)"
eq "refusals: the same worker" "$w2" "$(hap_workers "$master")"

# --- The old key withdrawn: one key left, tokens without kid take it ----------
publish new:2026-07
jwks --reload-cmd "kill -USR2 $master"
eq "old key withdrawn: exit 0" 0 $?
check "old key withdrawn: reloaded" wait_new_worker "$master" "$w2"
expect "old key withdrawn: its token" 401 unknown-key "$old"
expect "old key withdrawn: the new kid" 201 "" "$(mint new 2026-07)"
expect "one key again: a token without kid" 201 "" "$(mint new "")"
eq "old key withdrawn: one key file left" 1 "$(find "$T/jwks" -name 'k-*.pem' | wc -l)"

# --- A kid with a trailing newline beside the kid in use ------------------------
# It would split its map line and shadow the good one (401 unknown-key for
# every token of the key in use): it is left out, the good key keeps working.
w3=$(hap_workers "$master")
publish new:2026-07 ec:ec-1 "old:2026-07
"
jwks --reload-cmd "kill -USR2 $master"
eq "kid '2026-07\\n' beside 2026-07: exit 0" 0 $?
check "kid '2026-07\\n': left out, said" grep -q "'2026-07\\\\n') left out" "$T/jwks.out"
check "kid '2026-07\\n': reloaded" wait_new_worker "$master" "$w3"
expect "kid '2026-07\\n' beside 2026-07: the good key's token" 201 "" "$(mint new 2026-07)"
expect "kid '2026-07\\n' beside 2026-07: the other kept kid" 201 "" "$(mint ec ec-1 --alg ES256)"
expect "kid '2026-07\\n' beside 2026-07: the left-out key's token" 401 invalid-signature "$(mint old 2026-07)"

# --- haproxy -c: clean with -dW; RL_JWKS_MAP excludes RL_JWT_KEY<n> ------------
hcheck() { env RL_HAPROXY_DIR="$HAPROXY_FILES" RL_ADMIN_SOCK="$T/c.sock" RL_JWKS_MAP="$T/jwks/kid.map" "$@" \
	"$HAPROXY" -c -dW -f "$HAPROXY_FILES/haproxy.cfg" -f "$T/jwks/keys.cfg" 2>&1; }
out=$(hcheck); rc=$?
eq "haproxy -c -dW with RL_JWKS_MAP and keys.cfg: passes" 0 "$rc"
eq "haproxy -c -dW: no warning" "" "$(grep -v 'Configuration file is valid\|version is\|path to executable' <<<"$out")"
out=$(hcheck RL_JWT_KEY1="$T/new/jwt-public.pem" RL_JWT_KID1=x); rc=$?
check "RL_JWKS_MAP with RL_JWT_KEY1: haproxy -c fails" test "$rc" -ne 0
check "RL_JWKS_MAP with RL_JWT_KEY1: named" grep -q 'RL_JWKS_MAP replaces' <<<"$out"
t_done
