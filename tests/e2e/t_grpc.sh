#!/usr/bin/env bash
# The edge's own answers to gRPC calls, seen by a real gRPC client (Python
# grpcio, tests/e2e/grpc_edge.py) through ratelimit-edge.cfg + a frontend with
# ratelimit-frontend.cfg's lines in front of a real gRPC server, over h2c and
# over h2 (TLS, ALPN): a call over the limit is RESOURCE_EXHAUSTED (not the
# UNAVAILABLE an HTTP 429 becomes) with the retry hint in grpc-message and
# Retry-After and the RateLimit fields as trailing metadata; no identity is
# UNAUTHENTICATED; no decision (Redis or the agent stopped) is UNAVAILABLE;
# each is a Trailers-Only answer, one HEADERS frame that ends the stream; a
# large request (drained by ratelimit-drain.lua) gets the same. Non-gRPC
# requests (and grpc-web) keep the HTTP answers; the edge's 400 reaches gRPC
# clients as INTERNAL. Instance A answers with the deny lines, B (with
# RL_DRAIN_LUA) with ratelimit-edge.cfg's "http-response return" lines.
. "$(dirname "$0")/../lib.sh"
t_setup

# Debian's python3-grpcio is for the system's python3, which may come after
# another one in PATH.
GRPC_PY=
for py in python3 /usr/bin/python3; do
	"$py" -c 'import grpc' 2>/dev/null && { GRPC_PY=$py; break; }
done
if [ -z "$GRPC_PY" ]; then
	echo "# python3-grpcio missing (make deps): skipped"
	t_done; exit
fi
GRPC="$GRPC_PY $ROOT/tests/e2e/grpc_edge.py"

mkdir -p "$T/hap" "$T/pki"
cp -r "$ROOT/haproxy/." "$T/hap/"
cat > "$T/hap/routes.map" <<'MAP'
POST/chain.Query/         grpcq    key
*                         anon     ip   fail=open
MAP
printf "grpc-key-1 ACC-G1\ngrpc-key-2 ACC-G2\n" > "$T/hap/apikeys.map"
POLICIES="policy grpcq 2/1h
policy anon 1000/1m on-redis-error=allow"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
	-addext subjectAltName=DNS:localhost -keyout "$T/pki/edge.key" -out "$T/pki/edge.pem" 2>/dev/null
cat "$T/pki/edge.pem" "$T/pki/edge.key" > "$T/pki/edge.bundle"

# The gRPC server.
$GRPC serve "$T/grpc.port" >>"$T/grpc.log" 2>&1 &
t_track $!
for _ in $(seq 100); do [ -s "$T/grpc.port" ] && break; sleep 0.1; done
GRPC_PORT=$(cat "$T/grpc.port" 2>/dev/null)
[ -n "$GRPC_PORT" ] || fail "the gRPC server started"

# A site of one frontend as docs/integrate.md says (from ratelimit-edge, the
# frontend lines), h2c on RL_BIND and TLS offering h2, and the gRPC server
# as its backend (proto h2). Two instances: A answers with the deny lines;
# B has RL_DRAIN_LUA, which reads every denied HTTP/2 request's body first
# and answers with ratelimit-edge.cfg's "http-response return" lines.
# site NAME TLSPORT: writes $T/site-NAME.cfg.
site() {
	{
		cat <<-CFG
		global
		    log stdout format raw local0
		frontend grpc_edge from ratelimit-edge
		    bind "\${RL_BIND}" proto h2
		    bind 127.0.0.1:$2 ssl crt $T/pki/edge.bundle alpn h2
		CFG
		cat "$T/hap/ratelimit-frontend.cfg"
		cat <<-CFG
		    default_backend be_grpc
		backend be_grpc
		    server g1 127.0.0.1:$GRPC_PORT proto h2
		CFG
	} > "$T/site-$1.cfg"
}
TLS_PORT_A=$(free_port)
TLS_PORT_B=$(free_port)
site A "$TLS_PORT_A"
site B "$TLS_PORT_B"

HAPROXY_FILES=$T/hap
jwt_setup
start_redis
start_agent "$E2E_REDIS_TIMEOUT
$POLICIES"
start_haproxy A "$T/hap/ratelimit-edge.cfg" -f "$T/site-A.cfg" -f "$T/hap/ratelimit-agent.cfg"
export RL_DRAIN_LUA=$T/hap/ratelimit-drain.lua
start_haproxy B "$T/hap/ratelimit-edge.cfg" -f "$T/site-B.cfg" -f "$T/hap/ratelimit-agent.cfg"
wait_port "$TLS_PORT_A" && wait_port "$TLS_PORT_B" || fail "the TLS binds listen"
TLS=(--tls "$T/pki/edge.pem")
KEY=(--md x-api-key=grpc-key-1)

# call TARGET METHOD [args]: one call; $T/call.json holds what it saw.
call() { $GRPC call "$@" > "$T/call.json" 2>>"$T/client.log"; }
# js FILTER: from the last call.
js() { jq -r "$1" "$T/call.json"; }
# via INST h2c|h2 METHOD [args]: one call to instance INST over h2c or TLS.
via() {
	local inst=$1 proto=$2 hp=HAP_PORT_$1 tp=TLS_PORT_$1; shift 2
	if [ "$proto" = h2c ]; then call "127.0.0.1:${!hp}" "$@"
	else call "127.0.0.1:${!tp}" "$@" "${TLS[@]}"; fi
}
# frames INST [NAME=VALUE]: the frames of a call's answer (h2c).
frames() { local hp=HAP_PORT_$1; shift; $GRPC frames "${!hp}" /chain.Query/Block "$@" 2>>"$T/client.log"; }

# --- Allowed: the backend's answer, with the RateLimit fields -------------
via A h2c /chain.Query/Block "${KEY[@]}"
eq "A h2c: the first call is allowed" OK "$(js .code)"
eq "A h2c: the server answered (echo) as account ACC-G1" "5 ACC-G1" "$(js '"\(.size) \(.initial["x-account"])"')"
eq "A h2c: RateLimit-Remaining as initial metadata" 1 "$(js '.initial["ratelimit-remaining"]')"
via B h2 /chain.Query/Block "${KEY[@]}"
eq "B h2 (TLS): the second call is allowed" "OK 0" "$(js '"\(.code) \(.initial["ratelimit-remaining"])"')"

for inst in A B; do
	# --- Over the limit: RESOURCE_EXHAUSTED ---------------------------------
	for proto in h2c h2; do
		via $inst $proto /chain.Query/Block "${KEY[@]}"
		eq "$inst $proto: over the limit the call is RESOURCE_EXHAUSTED" RESOURCE_EXHAUSTED "$(js .code)"
		ra=$(js '.trailing["retry-after"]')
		check "$inst $proto: Retry-After is trailing metadata ($ra s)" test "$ra" -ge 1 -a "$ra" -le 3600
		eq "$inst $proto: grpc-message names the policy and the retry hint" \
			"rate limit exceeded for policy grpcq, retry after $ra s" "$(js .details)"
		eq "$inst $proto: the RateLimit fields are trailing metadata" \
			"0 \"grpcq\";r=0;t=$ra" "$(js '"\(.trailing["ratelimit-remaining"]) \(.trailing["ratelimit"])"')"
		eq "$inst $proto: a Trailers-Only answer: no initial metadata" "{}" "$(jq -c .initial "$T/call.json")"
	done
	eq "$inst h2c: RESOURCE_EXHAUSTED is one HEADERS frame that ends the stream" \
		"HEADERS END_STREAM" "$(frames $inst x-api-key=grpc-key-1)"
	# A request larger than a buffer, read to its end by ratelimit-drain.lua
	# before the answer. (Without it, 2.6 resets the stream, CANCELLED, as
	# it does for every HTTP/2 answer given while the body still arrives.)
	if [ $inst = B ]; then
		via $inst h2c /chain.Query/Block "${KEY[@]}" --size 200000
		eq "$inst h2c: a 200 kB call over the limit is RESOURCE_EXHAUSTED" \
			"RESOURCE_EXHAUSTED rate limit exceeded for policy grpcq" "$(js .code) $(js .details | sed 's/,.*//')"
	fi

	# --- No identity: UNAUTHENTICATED ---------------------------------------
	via $inst h2c /chain.Query/Block
	eq "$inst h2c: no API key is UNAUTHENTICATED" "UNAUTHENTICATED unauthenticated: missing-api-key" "$(js .code) $(js .details)"
	via $inst h2 /chain.Query/Block --md x-api-key=nope
	eq "$inst h2 (TLS): an unknown API key is UNAUTHENTICATED" "UNAUTHENTICATED unauthenticated: unknown-api-key" "$(js .code) $(js .details)"
	eq "$inst h2c: UNAUTHENTICATED is one HEADERS frame that ends the stream" "HEADERS END_STREAM" "$(frames $inst)"

	# --- Not gRPC: the HTTP answers stay (curl, h2c) ------------------------
	if curl -V | grep -qw HTTP2; then
		hp=HAP_PORT_$inst
		for ct in application/octet-stream application/grpc-web+proto; do
			got=$(curl -s -m 10 -o /dev/null -w '%{http_code} %{content_type}' --http2-prior-knowledge -X POST \
				-H "Content-Type: $ct" -H 'X-API-Key: grpc-key-1' -d x "http://127.0.0.1:${!hp}/chain.Query/Block")
			eq "$inst h2c: a $ct POST over the limit still gets the HTTP 429" "429 application/problem+json" "$got"
		done
	fi
done

# --- The edge's 400 (a path it refuses): INTERNAL, as gRPC maps HTTP 400 ----
via A h2c /chain.Query//Block "${KEY[@]}"
eq "A h2c: a path the edge refuses (400) is INTERNAL" INTERNAL "$(js .code)"

# --- No decision: UNAVAILABLE ---------------------------------------------------
# Redis stopped: the agent answers status=error (grpcq fails closed), for an
# account it has not denied (ACC-G2: nothing cached).
stop_redis
for inst in A B; do
	via $inst h2c /chain.Query/Block --md x-api-key=grpc-key-2
	eq "$inst h2c: Redis down (the agent's error) is UNAVAILABLE" \
		"UNAVAILABLE no rate-limit decision; refusing rather than letting the request through" "$(js .code) $(js .details)"
done
# The agent stopped: no answer at all.
stop_agent
for inst in A B; do
	for proto in h2c h2; do
		via $inst $proto /chain.Query/Block "${KEY[@]}"
		eq "$inst $proto: the agent down is UNAVAILABLE" \
			"UNAVAILABLE no rate-limit decision; refusing rather than letting the request through" "$(js .code) $(js .details)"
		eq "$inst $proto: no RateLimit fields without a decision" "" "$(js '.trailing["ratelimit-remaining"] // ""')"
	done
	eq "$inst h2c: UNAVAILABLE is one HEADERS frame that ends the stream" \
		"HEADERS END_STREAM" "$(frames $inst x-api-key=grpc-key-1)"
done

t_done
