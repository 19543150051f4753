#!/usr/bin/env bash
# "An edge you add, not paste": what a user puts into a frontend is
# haproxy/ratelimit-frontend.cfg (at most 20 lines that are not comments),
# docs/integrate.md shows exactly that file, and everything else comes from
# ratelimit-edge.cfg, loaded with -f before the site's own file. Then what
# docs/integrate.md says HAProxy allows and refuses around "from", on this
# HAProxy (2.6 or 3.x), and the order of the rules: ratelimit-edge's first,
# the frontend's own after them, the decision where the lines stand.
. "$(dirname "$0")/../lib.sh"
t_setup
H=$HAPROXY_FILES
DOC=$ROOT/docs/integrate.md

# The lines, and how many: the shipped file and the guide's copy.
n=$(grep -cvE '^[[:space:]]*(#|$)' "$H/ratelimit-frontend.cfg")
echo "# ratelimit-frontend.cfg: $n lines that are not comments"
check "ratelimit-frontend.cfg: at most 20 lines that are not comments ($n)" test "$n" -ge 1 -a "$n" -le 20
doc=$(awk '$0 == "<!-- t_integrate: frontend-lines -->" { f = 1; next }
	f && /^```/ { if (inb) exit; inb = 1; next }
	f && inb { print }' "$DOC")
eq "docs/integrate.md's frontend lines are ratelimit-frontend.cfg, as shipped" "$(cat "$H/ratelimit-frontend.cfg")" "$doc"
dn=$(grep -cvE '^[[:space:]]*(#|$)' <<<"$doc")
check "docs/integrate.md's frontend lines: at most 20 that are not comments ($dn)" test "$dn" -ge 1 -a "$dn" -le 20
check "the lines hold the filter and the agent call (what cannot move)" \
	grep -q 'filter spoe engine ratelimit' "$H/ratelimit-frontend.cfg"
check "ratelimit-edge.cfg holds no filter (HAProxy refuses one in defaults)" \
	test -z "$(grep -E '^[[:space:]]*filter ' "$H/ratelimit-edge.cfg")"

# A site: global (its log), its own defaults (forwardfor, httplog,
# dontlog-normal), a frontend that takes ratelimit-edge, a backend.
SITE_PORT=$(free_port) APP_PORT=$(free_port)
site() {   # site FRONTEND-HEADER [LINES-FILE]: the site's config on stdout
	site_head
	cat <<-EOF
	$1
	    bind 127.0.0.1:$SITE_PORT
	    option dontlog-normal
	    http-request set-var(txn.site_saw) var(txn.rl_action)
	    http-request return status 301 hdr Location /moved if { path_beg /old/ }
	EOF
	[ -n "${2:-}" ] && cat "$2"
	cat <<-EOF
	    http-request set-path /rewritten%[path] if { path_beg /alias/ }
	    default_backend app
	backend app
	    server s1 127.0.0.1:$APP_PORT
	EOF
}
hc() {   # hc FILE...: haproxy -c -dW on them, in that order
	local args=() f
	for f in "$@"; do args+=(-f "$f"); done
	RL_HAPROXY_DIR=$H RL_APIKEYS_MAP=$H/apikeys.map RL_JWT_PUBKEY=$T/none.pem "$HAPROXY" -c -dW "${args[@]}" 2>&1
}
site "frontend api from ratelimit-edge" "$H/ratelimit-frontend.cfg" > "$T/site.cfg"
out=$(hc "$H/ratelimit-edge.cfg" "$T/site.cfg" "$H/ratelimit-agent.cfg"); rc=$?
eq "edge file first, the site (its defaults: forwardfor, httplog, dontlog-normal), the agent file: -c -dW passes ($out)" 0 "$rc"
check "no warning" test -z "$(grep -E 'WARNING|ALERT' <<<"$out")"

# What the guide says HAProxy refuses, each for the reason it gives.
out=$(hc "$T/site.cfg" "$H/ratelimit-edge.cfg" "$H/ratelimit-agent.cfg")
check "the edge file after the site's: 'from' cannot find it ($(grep -o "defaults section 'ratelimit-edge' not found" <<<"$out" | head -1))" \
	grep -q "defaults section 'ratelimit-edge' not found" <<<"$out"
grep -v 'filter spoe' "$H/ratelimit-frontend.cfg" > "$T/nofilter.txt"
site "frontend api from ratelimit-edge" "$T/nofilter.txt" > "$T/nofilter.cfg"
out=$(hc "$H/ratelimit-edge.cfg" "$T/nofilter.cfg" "$H/ratelimit-agent.cfg")
check "without the filter line: refused (send-spoe-group needs the frontend's filter)" \
	grep -q "unable to find SPOE engine 'ratelimit'" <<<"$out"
grep -v '^    log global$' "$H/ratelimit-frontend.cfg" > "$T/nolog.txt"
site "frontend api from ratelimit-edge" "$T/nolog.txt" > "$T/nolog.cfg"
out=$(hc "$H/ratelimit-edge.cfg" "$T/nolog.cfg" "$H/ratelimit-agent.cfg")
check "without 'log global': -dW refuses (the frontend has no log address: ratelimit-edge is not the site's defaults)" \
	grep -q "since it has no log address" <<<"$out"
site "listen api from ratelimit-edge" "$H/ratelimit-frontend.cfg" | sed '/^backend app/,$d; s/^    default_backend app$/    server s1 127.0.0.1:1/' > "$T/listen.cfg"
out=$(hc "$H/ratelimit-edge.cfg" "$T/listen.cfg" "$H/ratelimit-agent.cfg")
check "a listen section cannot take ratelimit-edge" grep -q "a listen section cannot inherit from a defaults section defining TCP/HTTP rules" <<<"$out"
{ echo "defaults mysite from ratelimit-edge"; echo "    timeout client 10s"; } > "$T/chain.cfg"
out=$(hc "$H/ratelimit-edge.cfg" "$T/chain.cfg")
check "a defaults section cannot take ratelimit-edge" grep -q "cannot inherit from a defaults section defining TCP/HTTP rules" <<<"$out"

# The order, running: the routes map with one limited path and an exempt
# one; an agent and Redis; a backend echoing what it got.
cp -r "$H" "$T/hx"
cat > "$T/hx/routes.map" <<'MAP'
GET/health -
GET/alias/ anon ip
GET/old/ anon ip
* anon ip
MAP
start_redis
AGENT_PORT=$(free_port)
start_agent "$E2E_REDIS_TIMEOUT
policy anon 2/1m"
cat > "$T/app.cfg" <<EOF
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend app
    bind 127.0.0.1:$APP_PORT
    http-request return status 200 content-type application/json lf-string '{"path":"%[path]","xff":"%[req.hdr(x-forwarded-for)]","action":"%[req.hdr(x-site-saw)]"}'
EOF
"$HAPROXY" -db -f "$T/app.cfg" >>"$T/app.log" 2>&1 &
t_track $!
sed 's|^    default_backend app$|    http-request set-header X-Site-Saw "%[var(txn.site_saw)]"\n    default_backend app|' "$T/site.cfg" > "$T/site-run.cfg"
run_site() {   # run_site CFG LOG [VAR=VALUE...]: the site, ratelimit-edge.cfg first, the agent file last
	local cfg=$1 log=$2; shift 2
	env RL_HAPROXY_DIR="$T/hx" RL_APIKEYS_MAP="$T/hx/apikeys.map" RL_JWT_PUBKEY="$T/none.pem" \
		RL_AGENT_ADDR="127.0.0.1:$AGENT_PORT" RL_SPOE_TIMEOUT=2s "$@" \
		"$HAPROXY" -db -f "$H/ratelimit-edge.cfg" -f "$cfg" -f "$H/ratelimit-agent.cfg" >>"$log" 2>&1 &
	t_track $!
}
run_site "$T/site-run.cfg" "$T/site.log"
if ! wait_port "$APP_PORT" || ! wait_port "$SITE_PORT"; then fail "haproxy did not start"; fi
for _ in $(seq 40); do curl -s -o /dev/null "http://127.0.0.1:$SITE_PORT/health" && break; sleep 0.1; done
get() { RSP_STATUS=$(curl -s -m 10 -D "$T/rsp.hdr" -o "$T/rsp.body" -w '%{http_code}' "http://127.0.0.1:$SITE_PORT$1"); }

get /alias/x
eq "/alias/x: 200" 200 "$RSP_STATUS"
eq "the frontend's own rules run after ratelimit-edge's (they see txn.rl_action)" ask "$(jq -r .action "$T/rsp.body")"
eq "the frontend's set-path ran after the lookup: the backend got the rewritten path" /rewritten/alias/x "$(jq -r .path "$T/rsp.body")"
eq "the lookup used the path as sent (GET/alias/ anon ip, 2/1m)" '"anon";r=1;t=60' "$(rsp_hdr RateLimit)"
eq "option forwardfor of the site's defaults: still added by its backend" 127.0.0.1 "$(jq -r .xff "$T/rsp.body")"
get /health
eq "exempt /health: 200, no RateLimit header" "200 " "$RSP_STATUS $(rsp_hdr RateLimit)"
eq "exempt /health: nothing asked (no txn.rl_action)" "" "$(jq -r .action "$T/rsp.body")"
before=$(counted_keys)
get /old/x
eq "the frontend's own answer (301) comes before the decision" 301 "$RSP_STATUS"
eq "301: no RateLimit header (the agent was not asked)" "" "$(rsp_hdr RateLimit)"
eq "301: nothing counted" "$before" "$(counted_keys)"
get /alias/y; get /alias/z
eq "the third request in the minute: 429" 429 "$RSP_STATUS"
get /health/a%2Fb
eq "an encoded slash: 400 before the lookup" 400 "$RSP_STATUS"
# RL_ALLOW_ENCODED_SLASH set: %2F passes (other needless escapes do not).
P2=$(free_port)
sed "s|127.0.0.1:$SITE_PORT|127.0.0.1:$P2|" "$T/site-run.cfg" > "$T/site-slash.cfg"
run_site "$T/site-slash.cfg" "$T/site-slash.log" RL_ALLOW_ENCODED_SLASH=1
wait_port "$P2" || fail "haproxy (RL_ALLOW_ENCODED_SLASH) did not start"
s=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$P2/health/a%2Fb")
eq "RL_ALLOW_ENCODED_SLASH: an encoded slash passes (exempt /health prefix: 200)" 200 "$s"
s=$(curl -s -m 10 -o /dev/null -w '%{http_code}' --path-as-is "http://127.0.0.1:$P2/%61lias/x")
eq "RL_ALLOW_ENCODED_SLASH: %61 is still refused" 400 "$s"
for _ in $(seq 50); do grep -q ' 429 ' "$T/site.log" && break; sleep 0.1; done
check "dontlog-normal: the 429 is logged ($(grep ' 429 ' "$T/site.log" | head -1))" grep -q ' 429 ' "$T/site.log"
check "dontlog-normal: an allowed 200 is not" test -z "$(grep -E ' 200 [0-9]+ .*GET /alias/x ' "$T/site.log")"
t_done
