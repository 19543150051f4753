#!/usr/bin/env bash
# The edge's own answers (401, 429, 503) to a POST with a body over HTTP/2,
# h2c (prior knowledge) and h2 (TLS, ALPN): the client gets the status, not a
# reset stream. HAProxy's own answers drop the rest of the request; on 2.6
# that resets (CANCEL) a stream the client is still sending on, and curl
# drops the answer ("stream 1 was not closed cleanly"). A body that fits in a
# buffer is waited for ("wait-for-body"); a larger one (200 kB, 1 MB) is read
# to its end by ratelimit-drain.lua before the edge answers, so curl has sent
# all of it when the answer comes, and the answer is the deny lines' own. The
# 60 kB body is sent a moment after the headers, as a client streaming an
# upload does, so that it is still on its way when the edge has decided; each
# case is asked several times.
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
# Without RL_DRAIN_LUA the shipped edge loads no Lua: a directory that has
# no ratelimit-drain.lua (a site that linked step 1's files before it
# existed) still loads after a package upgrade.
mkdir -p "$T/nolua"
cp -r "$ROOT/haproxy/." "$T/nolua/"
rm -f "$T/nolua/ratelimit-drain.lua"
check "without RL_DRAIN_LUA: the edge loads with no ratelimit-drain.lua in RL_HAPROXY_DIR" \
	env RL_HAPROXY_DIR="$T/nolua" RL_JWT_PUBKEY="$ROOT/haproxy/haproxy.cfg" "$HAPROXY" -c -q \
	-f "$T/nolua/haproxy.cfg"
# The large-body cases below need the opt-in.
export RL_DRAIN_LUA=$T/hap/ratelimit-drain.lua
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

head -c 200000 /dev/zero > "$T/body200k"
head -c 1000000 /dev/zero > "$T/body1m"
# post_file URL FILE [curl args...]: a POST of FILE's bytes (with its
# Content-Length); prints "<status> <HTTP version> <bytes curl sent>".
post_file() {
	local url=$1 file=$2; shift 2
	curl -s -m 10 -o /dev/null -w '%{http_code} %{http_version} %{size_upload}' -X POST \
		-H 'Content-Type: application/octet-stream' --data-binary "@$file" "$@" "$url"
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
	# Larger than HTTP/2's first window (64 kB): the edge reads the body to
	# its end before it answers (curl sent all of it).
	for size in 200000 1000000; do
		f=$T/body200k; [ "$size" = 1000000 ] && f=$T/body1m
		got401=""; got429=""
		for _ in 1 2 3; do
			got401+="$(post_file "$url" "$f" "${opts[@]}") "
			got429+="$(post_file "$url" "$f" "${opts[@]}" -H "Authorization: Bearer $TOKEN") "
		done
		eq "$proto: 3 POSTs of $size bytes and no token get 401 after their body" \
			"401 2 $size 401 2 $size 401 2 $size " "$got401"
		eq "$proto: 3 POSTs of $size bytes over the limit get 429 after their body" \
			"429 2 $size 429 2 $size 429 2 $size " "$got429"
	done
done

# The answer after a drained body is the deny lines' own: the same status,
# headers and body as the 429 and 401 of a POST without a body (digits aside:
# Retry-After and RateLimit-Reset count down).
# answer URL [curl args...]: the status line, the headers sorted, the body.
answer() {
	local url=$1; shift
	curl -s -m 10 -D "$T/ans.hdr" -o "$T/ans.body" -X POST "$@" "$url" >/dev/null
	{ head -1 "$T/ans.hdr"; tail -n +2 "$T/ans.hdr" | tr -d '\r' | grep . | sort; cat "$T/ans.body"; } | tr 0-9 N
}
h2c=(--http2-prior-knowledge)
url=http://127.0.0.1:$H2C_PORT/transfers
for auth in "" "Authorization: Bearer $TOKEN"; do
	small=$(answer "$url" "${h2c[@]}" ${auth:+-H "$auth"})
	large=$(answer "$url" "${h2c[@]}" ${auth:+-H "$auth"} -H 'Content-Type: application/octet-stream' --data-binary "@$T/body1m")
	want=401; [ -n "$auth" ] && want=429
	eq "h2c: a ${auth:+limited }POST of 1 MB gets $want" "HTTP/2 $want" "$(head -1 "$T/ans.hdr" | tr -d '\r' | sed 's/ *$//')"
	eq "h2c: the answer after 1 MB is the answer to an empty POST${auth:+ (with the token)}" "$small" "$large"
done

# No decision (the agent stopped): the 503 of a fail-closed route, after the
# body too.
stop_agent
got=$(post_file "$url" "$T/body1m" "${h2c[@]}" -H "Authorization: Bearer $TOKEN")
eq "h2c: a POST of 1 MB without a decision gets 503 after its body" "503 2 1000000" "$got"

t_done
