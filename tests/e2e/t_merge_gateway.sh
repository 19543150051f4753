#!/usr/bin/env bash
# docs/integrate.md applied to a second "existing edge", modeled on public
# API gateways: backends chosen by path, an alias served through a rewrite
# (/tip is /api/v1/tip), a public endpoint for anonymous callers, an h2c
# backend (gRPC-style, "proto h2"), a health path, set-log-level silent on a
# noisy path, option forwardfor/httplog/dontlog-normal in the site's
# defaults, and a stick-table limiter (sc_http_req_rate). The guide's steps
# ("from ratelimit-edge", the frontend lines, the drop-in's CONFIG and
# EXTRAOPTS) and its "Migrating from a stick-table limiter" section (its
# routes.map and shadow policies, then: remove "shadow" and reload the
# agent, remove the stick-table lines) are followed as written:
#   shadow phase, one instance: haproxy -c -dW clean; the limiter counts and
#     answers shadow-deny where it would refuse, the stick table still
#     refuses (its own 429, no RateLimit header);
#   enforced, two instances: the public path limited by address across both,
#     the limited path 429 + Retry-After after its limit, the alias in its
#     canonical path's window (and still rewritten), the health path exempt,
#     the h2 backend reached over h2 with the account, X-Forwarded-For at
#     the backends, the limiter's 429 logged on the silenced path.
. "$(dirname "$0")/../lib.sh"
t_setup
H=$HAPROXY_FILES
DOC=$ROOT/docs/integrate.md
echo "# $("$HAPROXY" -v | head -1)"

snippet() {   # snippet NAME: the code block under "<!-- t_integrate: NAME -->" in the guide (a list item's: unindented)
	awk -v tag="<!-- t_integrate: $1 -->" '
		{ l = $0; sub(/^ +/, "", l) }
		l == tag { f = 1; next }
		f && l ~ /^```/ { if (inb) exit; inb = 1; ind = index($0, "`") - 1; next }
		f && inb { print substr($0, ind + 1) }' "$DOC"
}
for s in files frontend-lines drop-in migrate-routes migrate-policies; do
	check "the guide has its \"$s\" block" test -n "$(snippet "$s")"
done

# --- The gateway's backends: blocks, transactions, core (tip, status,
# health), and a gRPC-style service spoken to over h2c ------------------------
for s in BLOCKS TXS CORE GRPC; do printf -v "${s}_PORT" '%s' "$(free_port)"; done
echo_json() { echo "http-request return status 200 content-type application/json lf-string '{\"app\":\"$1\",\"path\":\"%[path]\",\"ver\":\"%[req.ver]\",\"xff\":\"%[req.hdr(x-forwarded-for)]\",\"account\":\"%[req.hdr(x-account)]\"}'"; }
cat > "$T/servers.cfg" <<CFG
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend blocks
    bind 127.0.0.1:$BLOCKS_PORT
    $(echo_json blocks)
frontend txs
    bind 127.0.0.1:$TXS_PORT
    $(echo_json txs)
frontend core
    bind 127.0.0.1:$CORE_PORT
    $(echo_json core)
frontend grpc
    bind 127.0.0.1:$GRPC_PORT proto h2
    $(echo_json grpc)
CFG
"$HAPROXY" -db -f "$T/servers.cfg" >>"$T/servers.log" 2>&1 &
t_track $!
for s in BLOCKS TXS CORE GRPC; do v=${s}_PORT; wait_port "${!v}" || fail "server $s did not start"; done

# --- The gateway as it was ----------------------------------------------------
{ site_head '${SITE_SOCK}'; cat <<'CFG'; } > "$T/existing.cfg"

frontend gateway
    bind "127.0.0.1:${GW_PORT}"
    # status is polled all the time: not worth a log line
    http-request set-log-level silent if { path_beg /api/v1/status }
    # each address: 10 requests a minute (on this instance)
    stick-table type ip size 100k expire 2m store http_req_rate(1m)
    http-request track-sc0 src
    http-request deny deny_status 429 if { sc_http_req_rate(0) gt 10 }
    # the short alias
    http-request replace-path ^/tip$ /api/v1/tip
    acl is_blocks path_beg /api/v1/blocks/
    acl is_tx     path_beg /api/v1/tx
    acl is_grpc   path_beg /chain.Query/
    use_backend blocks if is_blocks
    use_backend txs    if is_tx
    use_backend grpc   if is_grpc
    default_backend core

backend blocks
    server b1 "${BLOCKS_ADDR}" check inter 1s
backend txs
    server t1 "${TXS_ADDR}" check inter 1s
backend core
    server c1 "${CORE_ADDR}" check inter 1s
backend grpc
    server g1 "${GRPC_ADDR}" proto h2 check inter 1s
CFG

# --- Step 1, and the migration's routes --------------------------------------
SRC=$T/usr/local/share/ratelimit-spoa/haproxy
D=$T/etc/haproxy/ratelimit
mkdir -p "$SRC" && cp -r "$H/." "$SRC/"
snippet files | sed -e "s|/usr/local/share/ratelimit-spoa/haproxy|$SRC|g" -e "s|/etc/haproxy/ratelimit|$D|g" \
	-e "$([ "$(id -u)" = 0 ] && getent group haproxy >/dev/null || echo 's/ -g haproxy//')" > "$T/step1.sh"
out=$(bash -e "$T/step1.sh" 2>&1)
eq "step 1's commands run ($out)" 0 "$?"
snippet migrate-routes > "$D/routes.map"
printf 'gw-key-1 ACC-G1\ngw-key-2 ACC-G2\ngw-key-3 ACC-G3\n' > "$D/apikeys.map"

# --- Step 2: from ratelimit-edge, the lines after the rules that answer
# without a backend (here the stick table's deny), what the site's defaults
# gave the frontend that ratelimit-edge does not (option dontlog-normal) ----
snippet frontend-lines > "$T/lines.txt"
awk -v lines="$T/lines.txt" '
	/^frontend gateway$/ { print $0 " from ratelimit-edge"; fe = 1; next }
	fe && /^    bind / { print; print "    option dontlog-normal"; next }
	{ print }
	fe && /^    http-request deny / { while ((getline l < lines) > 0) print l; close(lines); fe = 0 }
' "$T/existing.cfg" > "$T/haproxy.cfg"
eq "the lines went in once, after the stick table's deny" 1 \
	"$(grep -A1 'sc_http_req_rate(0) gt 10' "$T/haproxy.cfg" | grep -c '=== ratelimit-spoa: the lines')"
# The enforced phase: the stick-table lines removed, as the guide says.
grep -vE '^    (stick-table |http-request track-sc0 |http-request deny .*sc_http_req_rate)' "$T/haproxy.cfg" \
	| grep -v '# each address: 10 requests a minute' > "$T/haproxy-enforced.cfg"
eq "enforced: no stick table left" 0 "$(grep -c 'sc_http_req_rate\|stick-table\|track-sc0' "$T/haproxy-enforced.cfg")"

# --- Step 4: the agent in shadow, the drop-in ---------------------------------
start_redis
AGENT_PORT=$(free_port)
METRICS_PORT=$(free_port)
start_agent "$E2E_REDIS_TIMEOUT
metrics 127.0.0.1:$METRICS_PORT
$(snippet migrate-policies)"
check "shadow phase: every policy of the guide is in shadow" \
	test -z "$(grep '^policy ' "$T/agent.conf" | grep -v ' shadow')"
snippet drop-in | sed -e "s|/etc/haproxy/ratelimit|$D|g" -e "s|/etc/haproxy/haproxy.cfg|$T/haproxy.cfg|g" \
	-e "s|/usr/sbin/ratelimit-spoa|$AGENT|g" -e "s|/etc/ratelimit-spoa/ratelimit-spoa.conf|$T/agent.conf|g" > "$T/override.conf"
sed -n 's/^Environment=/export /p' "$T/override.conf" > "$T/dropin.env"
out=$(bash -c "$(sed -n 's/^ExecStartPre=//p' "$T/override.conf")" 2>&1)
eq "the drop-in's ExecStartPre (ratelimit-spoa -c --routes) passes on the migration's routes ($out)" 0 "$?"
site_env() {
	. "$T/dropin.env"
	export RL_AGENT_ADDR=127.0.0.1:$AGENT_PORT RL_SPOE_TIMEOUT=2s RL_JWT_PUBKEY=$T/none.pem
	export BLOCKS_ADDR=127.0.0.1:$BLOCKS_PORT TXS_ADDR=127.0.0.1:$TXS_PORT CORE_ADDR=127.0.0.1:$CORE_PORT GRPC_ADDR=127.0.0.1:$GRPC_PORT
}
hcheck() {   # hcheck CFG: haproxy -c -dW as the unit runs it, CFG in haproxy.cfg's place
	# shellcheck disable=SC2086
	( site_env; SITE_SOCK=$T/check.sock GW_PORT=1 "$HAPROXY" -c -dW -f ${CONFIG/$T\/haproxy.cfg/$1} -f "$AGENT_CFG" 2>&1 )
}
. "$T/dropin.env"
AGENT_CFG=$(sed -n 's/.* -f \([^ ]*\).*/\1/p' <<<"$EXTRAOPTS")
out=$(hcheck "$T/existing.cfg")
eq "the gateway as it was passes haproxy -c -dW ($out)" 0 "$?"
for c in haproxy haproxy-enforced; do
	out=$(hcheck "$T/$c.cfg")
	eq "haproxy -c -dW: $c.cfg (site defaults with forwardfor/httplog/dontlog-normal) passes" 0 "$?"
	check "$c.cfg: no warning or alert ($out)" test -z "$(grep -E 'WARNING|ALERT' <<<"$out")"
done

run_gw() {   # run_gw NAME CFG: an instance of the gateway, GW_<NAME> its port
	local port; port=$(free_port)
	# shellcheck disable=SC2086
	( site_env; export SITE_SOCK=$T/gw-$1.sock GW_PORT=$port
	  exec "$HAPROXY" -db -f ${CONFIG/$T\/haproxy.cfg/$2} -f "$AGENT_CFG" ) >>"$T/gw-$1.log" 2>&1 &
	printf -v "GW_PID_$1" '%s' "$!"; t_track "$!"
	printf -v "GW_$1" '%s' "$port"
	wait_port "$port" || fail "gateway $1 did not start"
}
get() {   # get NAME PATH [curl args]: RSP_STATUS, $T/rsp.hdr, $T/rsp.body
	local v="GW_$1" p=$2; shift 2
	RSP_STATUS=$(curl -s -m 10 "$@" -D "$T/rsp.hdr" -o "$T/rsp.body" -w '%{http_code}' "http://127.0.0.1:${!v}$p")
}
metric() { curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

# --- Shadow phase: the limiter counts, the stick table still refuses --------
run_gw S "$T/haproxy.cfg"
# (readiness from another address: 127.0.0.1's requests are the stick table's count below)
for _ in $(seq 40); do get S /api/v1/health --interface 127.0.0.3; [ "$RSP_STATUS" = 200 ] && break; sleep 0.1; done
eq "shadow: the exempt health path answers" 200 "$RSP_STATUS"
statuses=
for i in 1 2 3 4; do
	get S /api/v1/blocks/$i -H "X-API-Key: gw-key-1"
	statuses="$statuses $RSP_STATUS"
done
eq "shadow: 4 reads on a 3/1m policy all pass" " 200 200 200 200" "$statuses"
eq "shadow: the 4th carries the would-be verdict (RateLimit r=0)" '"reads";r=0' "$(rsp_hdr RateLimit | cut -d';' -f1-2)"
eq "shadow: the agent counted one shadow-deny" 1 "$(metric 'ratelimit_spoa_decisions_total{policy="reads",status="shadow-deny"}')"
statuses=
for i in 5 6 7 8 9 10 11; do get S /api/v1/status; statuses="$statuses $RSP_STATUS"; done
eq "shadow: the address's 5th to 10th requests pass, the 11th is the stick table's 429" " 200 200 200 200 200 200 429" "$statuses"
eq "shadow: the stick table's 429 carries no RateLimit header (the limiter was not asked)" "" "$(rsp_hdr RateLimit-Policy)"
check "shadow: the stick table's 429 is its own, not the limiter's problem document" \
	test "$(rsp_hdr Content-Type)" != application/problem+json
kill -TERM "$GW_PID_S"; wait_gone "$GW_PID_S"

# --- Enforce: remove "shadow", reload the agent; remove the stick table -------
sed -i 's/ shadow\b//' "$T/agent.conf"
check "enforced: no policy left in shadow" test -z "$(grep '^policy .*shadow' "$T/agent.conf")"
kill -HUP "$AGENT_PID"
for _ in $(seq 100); do grep -q 'event=reloaded' "$T/agent.log" && break; sleep 0.1; done
check "the agent reloaded its config" grep -q 'event=reloaded' "$T/agent.log"
rcli flushall >/dev/null   # (the test's: fresh windows for the checks below)
run_gw A "$T/haproxy-enforced.cfg"
run_gw B "$T/haproxy-enforced.cfg"
for n in A B; do for _ in $(seq 40); do get $n /api/v1/health; [ "$RSP_STATUS" = 200 ] && break; sleep 0.1; done; done

# The public endpoint: anonymous callers by address, one window for both
# instances (the stick table counted each instance on its own).
statuses=
for i in $(seq 11); do n=$([ $((i % 2)) = 1 ] && echo A || echo B); get "$n" /api/v1/status; statuses="$statuses $RSP_STATUS"; done
eq "public /api/v1/status alternating A/B: 10 pass, the 11th is 429" "$(printf ' 200%.0s' $(seq 10)) 429" "$statuses"
eq "public: the 429 is the limiter's (policy public)" '"public";q=10;w=60' "$(rsp_hdr RateLimit-Policy)"
check "public: Retry-After ($(rsp_hdr Retry-After))" grep -Eq '^[0-9]+$' <<<"$(rsp_hdr Retry-After)"
check "public: counted by address (an ip:127.0.0.1 key)" test -n "$(rcli --scan --pattern '*ip:127.0.0.1*')"
get B /api/v1/status -H "X-Forwarded-For: 203.0.113.9"
eq "public: a client's X-Forwarded-For is not its address (still 429)" 429 "$RSP_STATUS"

# The exempt health path: no decision, nothing counted.
before=$(counted_keys)
for _ in 1 2 3; do get A /api/v1/health; done
eq "health: 200 after the address's limit" 200 "$RSP_STATUS"
eq "health: no RateLimit header" "" "$(rsp_hdr RateLimit)"
eq "health: nothing counted" "$before" "$(counted_keys)"

# A limited path: tx 2/1m per API key.
statuses=
for n in A B A; do get $n /api/v1/tx -X POST -H "X-API-Key: gw-key-1"; statuses="$statuses $RSP_STATUS"; done
eq "POST /api/v1/tx (tx 2/1m) A/B/A: 2 pass, then 429" " 200 200 429" "$statuses"
check "tx: 429 with Retry-After ($(rsp_hdr Retry-After))" grep -Eq '^[0-9]+$' <<<"$(rsp_hdr Retry-After)"
eq "tx: the problem document" application/problem+json "$(rsp_hdr Content-Type)"

# The alias: /tip is /api/v1/tip's window (reads 3/1m), and still rewritten.
statuses=
for p in /api/v1/tip /tip /api/v1/tip /tip; do get A "$p" -H "X-API-Key: gw-key-2"; statuses="$statuses $RSP_STATUS"; done
eq "reads 3/1m: /api/v1/tip, /tip, /api/v1/tip, /tip: one window, the 4th is 429" " 200 200 200 429" "$statuses"
get B /tip -H "X-API-Key: gw-key-3"
eq "alias /tip, another key: 200" 200 "$RSP_STATUS"
eq "alias /tip: the backend got the rewritten path" /api/v1/tip "$(jq -r .path "$T/rsp.body")"
eq "alias /tip: limited (its own line in routes.map)" '"reads";r=2;t=60' "$(rsp_hdr RateLimit)"
eq "the backend sees the verified account" ACC-G3 "$(jq -r .account "$T/rsp.body")"
eq "option forwardfor (site defaults, the backends'): X-Forwarded-For at the backend" 127.0.0.1 "$(jq -r .xff "$T/rsp.body")"

# The h2 backend (proto h2), called as gRPC clients do: h2c, POST.
get A /chain.Query/Block --http2-prior-knowledge -X POST -H "X-API-Key: gw-key-3" -H "Content-Type: application/grpc"
eq "gRPC-style POST over h2c: 200" 200 "$RSP_STATUS"
eq "the grpc backend was reached over HTTP/2" "grpc 2.0" "$(jq -r '"\(.app) \(.ver)"' "$T/rsp.body")"
eq "grpc: the account" ACC-G3 "$(jq -r .account "$T/rsp.body")"
eq "grpc: limited (grpc 5/1m)" '"grpc";r=4;t=60' "$(rsp_hdr RateLimit)"
# gRPC's own answer to a gRPC request (t_grpc.sh has a real gRPC client).
get B /chain.Query/Block --http2-prior-knowledge -X POST -H "Content-Type: application/grpc"
eq "gRPC request without an API key: gRPC's UNAUTHENTICATED (200, grpc-status 16)" \
	"200 16 unauthenticated: missing-api-key application/grpc" \
	"$RSP_STATUS $(rsp_hdr grpc-status) $(rsp_hdr grpc-message) $(rsp_hdr Content-Type)"
get B /chain.Query/Block --http2-prior-knowledge -X POST -H "Content-Type: application/octet-stream"
eq "grpc route, not a gRPC request, without an API key: 401" 401 "$RSP_STATUS"
eq "401 on a key route: no WWW-Authenticate (a bearer challenge is for jwt routes)" "" "$(rsp_hdr WWW-Authenticate)"
eq "401: why" missing-api-key "$(jq -r .detail "$T/rsp.body")"

# The logs: the site silences /api/v1/status and logs only errors
# (dontlog-normal); the limiter's 429 there and its 401 stay.
for _ in $(seq 50); do grep -q ' 401 ' "$T/gw-B.log" && break; sleep 0.1; done
check "the public path's 429 is logged despite set-log-level silent ($(grep -h ' 429 .*GET /api/v1/status' "$T/gw-A.log" "$T/gw-B.log" | head -1))" \
	grep -qh ' 429 .*"GET /api/v1/status' "$T/gw-A.log" "$T/gw-B.log"
check "the 401 is logged" grep -q ' 401 .*"POST [^ ]*/chain.Query/Block' "$T/gw-B.log"
check "the gRPC refusal is logged: status 200, the edge's own answer (PR)" \
	grep -q '<NOSRV> [-0-9/]* 200 .* PR-- .*"POST [^ ]*/chain.Query/Block' "$T/gw-B.log"
eq "dontlog-normal: no allowed 200 is logged" "" "$(grep -h ' 200 ' "$T/gw-A.log" "$T/gw-B.log" | grep -v '/<NOSRV> ' | head -1)"
t_done
