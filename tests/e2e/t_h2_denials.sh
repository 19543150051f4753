#!/usr/bin/env bash
# The edge's own answers (401, 429) to a POST with a body over HTTP/2, h2c
# (prior knowledge) and h2 (TLS, ALPN): the client gets the status, not a
# reset stream. Without the "wait-for-body" line of ratelimit-frontend.cfg,
# HAProxy 2.6 answers as soon as the headers are decided, ends the stream
# while the body is still coming and resets it (CANCEL), and curl drops the
# answer ("stream 1 was not closed cleanly"). The body is sent a moment after
# the headers, as a client streaming an upload does, so that it is still on
# its way when the edge has decided; each case is asked several times.
. "$(dirname "$0")/../lib.sh"
t_setup

if ! curl -V | grep -qw HTTP2; then
	echo "# curl without HTTP/2: skipped"
	t_done; exit
fi

mkdir -p "$T/hap" "$T/pki"
cp -r "$ROOT/haproxy/." "$T/hap/"
cat > "$T/hap/routes.map" <<'MAP'
POST/transfers            h2deny   jwt
*                         anon     ip   fail=open
MAP
POLICIES="policy h2deny 1/1h
policy anon 1000/1m on-redis-error=allow"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
	-keyout "$T/pki/edge.key" -out "$T/pki/edge.pem" 2>/dev/null
cat "$T/pki/edge.pem" "$T/pki/edge.key" > "$T/pki/edge.bundle"

# The demo edge with two binds more: h2c and TLS offering h2.
H2C_PORT=$(free_port)
H2_PORT=$(free_port)
sed "s|^    bind \"\${RL_BIND-127.0.0.1:8080}\"$|&\\
    bind 127.0.0.1:$H2C_PORT proto h2\\
    bind 127.0.0.1:$H2_PORT ssl crt $T/pki/edge.bundle alpn h2,http/1.1|" \
	"$T/hap/haproxy.cfg" > "$T/hap/h2.cfg"
check "the edge has the h2c and h2 binds" grep -q "proto h2" "$T/hap/h2.cfg"

HAPROXY_FILES=$T/hap
jwt_setup
start_redis
start_agent "$E2E_REDIS_TIMEOUT
$POLICIES"
start_backend
start_haproxy A "$T/hap/h2.cfg"
wait_port "$H2C_PORT" && wait_port "$H2_PORT" || fail "the h2 binds listen"

TOKEN=$(mint_token ACC-H2)

# post URL [curl args...]: a POST of a 60 kB body sent after the headers;
# prints "<status> <HTTP version>" ("000 0" when curl got no answer).
post() {
	local url=$1; shift
	(sleep 0.2; head -c 60000 /dev/zero) |
		curl -s -m 10 -o /dev/null -w '%{http_code} %{http_version}' -X POST \
			-H 'Content-Type: application/octet-stream' --data-binary @- "$@" "$url"
}

# The one request the policy allows, so that the next ones are denied.
req A POST /transfers "$TOKEN" -d x
eq "the first POST with the token is allowed" 201 "$RSP_STATUS"

for proto in h2c h2; do
	if [ "$proto" = h2c ]; then
		url=http://127.0.0.1:$H2C_PORT/transfers; opts=(--http2-prior-knowledge)
	else
		url=https://127.0.0.1:$H2_PORT/transfers; opts=(--http2 -k)
	fi
	got401=""; got429=""
	for _ in 1 2 3 4 5; do
		got401+="$(post "$url" "${opts[@]}") "
		got429+="$(post "$url" "${opts[@]}" -H "Authorization: Bearer $TOKEN") "
	done
	eq "$proto: 5 POSTs with a body and no token get 401 over HTTP/2" \
		"401 2 401 2 401 2 401 2 401 2 " "$got401"
	eq "$proto: 5 POSTs with a body over the limit get 429 over HTTP/2" \
		"429 2 429 2 429 2 429 2 429 2 " "$got429"
done

t_done
