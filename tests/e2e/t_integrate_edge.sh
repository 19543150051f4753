#!/usr/bin/env bash
# docs/integrate.md applied to a real-looking edge, as a new user would: an
# existing haproxy.cfg written here with an HTTP listener that redirects to
# HTTPS, a TLS listener (certificate made here with openssl), HSTS set in
# http-after-response, compression, a cache, a stats frontend, zero-warning,
# four checked servers with cookie stickiness, and a second (TLS) frontend
# logging JSON. The guide's file commands, the frontend lines, the CORS
# rule, the systemd drop-in (its settings, CONFIG, EXTRAOPTS and
# ExecStartPre) and the log formats are taken from the page itself (the
# "<!-- t_integrate: NAME -->" blocks); "from ratelimit-edge", the lines and
# the filter lines are placed by the page's rules, ratelimit-edge.cfg is
# loaded first as the drop-in's CONFIG says.
# Then, with two instances of the result on one agent and one Redis:
#   haproxy -c -dW clean (and the lines without the filter lines refused);
#   301 on :80 for a limited route, nothing counted;
#   over TLS one window for both instances, 429 + Retry-After + RateLimit
#   headers, 401 without identity; compression and the cache still work;
#   HSTS on every TLS answer; no X-API-Key (unless RL_FORWARD_API_KEY) and
#   no forged X-Account at a backend; rl=/reason= in the httplog and JSON
#   logs for a 429 and a limiter 503.
. "$(dirname "$0")/../lib.sh"
t_setup
H=$ROOT/haproxy
DOC=$ROOT/docs/integrate.md
ver=$("$HAPROXY" -v | sed -n 's/^HA-\{0,1\}Proxy version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p' | head -1)
read -r vmaj vmin <<<"$ver"
echo "# HAProxy $vmaj.$vmin ($HAPROXY)"

# snippet NAME: the code block under "<!-- t_integrate: NAME -->" in the guide.
snippet() {
	awk -v tag="<!-- t_integrate: $1 -->" '
		$0 == tag { f = 1; next }
		f && /^```/ { if (inb) exit; inb = 1; next }
		f && inb { print }' "$DOC"
}
for s in files frontend-lines cors-preflight drop-in log-httplog log-httplog-3 log-json-2.6 log-json-3; do
	check "the guide has its \"$s\" block" test -n "$(snippet "$s")"
done

# --- The site's servers: four app servers, a static server, a partner API ---
mkdir -p "$T/pki"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=localhost" \
	-keyout "$T/pki/site.key" -out "$T/pki/site.pem" 2>/dev/null
cat "$T/pki/site.pem" "$T/pki/site.key" > "$T/pki/site.bundle"
for s in APP1 APP2 APP3 APP4 STATIC PARTNER; do printf -v "${s}_PORT" '%s' "$(free_port)"; done
{
	cat <<-CFG
	defaults
	    mode http
	    timeout connect 5s
	    timeout client 30s
	    timeout server 30s
	CFG
	for i in 1 2 3 4; do
		v=APP${i}_PORT
		cat <<-CFG
		frontend app$i
		    bind 127.0.0.1:${!v}
		    http-request return status 200 content-type text/plain string ok if { path /health }
		    http-request return status 200 content-type application/json hdr Cache-Control no-store lf-string '{"app":"app$i","account":"%[req.hdr(x-account)]","pad":"$(printf 'abcdefgh%.0s' $(seq 64))","headers":"%[req.hdrs,json(utf8s)]"}'
		CFG
	done
	cat <<-CFG
	frontend static_app
	    bind 127.0.0.1:$STATIC_PORT
	    http-request return status 200 content-type application/json hdr Cache-Control max-age=60 lf-string '{"app":"static","id":"%[uuid]","pad":"$(printf 'abcdefgh%.0s' $(seq 64))","headers":"%[req.hdrs,json(utf8s)]"}'
	frontend partner_app
	    bind 127.0.0.1:$PARTNER_PORT
	    http-request return status 200 content-type application/json lf-string '{"app":"partner","account":"%[req.hdr(x-account)]","headers":"%[req.hdrs,json(utf8s)]"}'
	CFG
} > "$T/servers.cfg"
"$HAPROXY" -db -f "$T/servers.cfg" >>"$T/servers.log" 2>&1 &
t_track $!
for s in APP1 APP2 APP3 APP4 STATIC PARTNER; do v=${s}_PORT; wait_port "${!v}" || fail "server $s did not start"; done

# --- The edge as it was -------------------------------------------------------
if [ "$vmaj" -ge 3 ]; then
	json_before='    log-format "%{+json}o %(client_ip)ci %(client_port)cp %(request_date)tr %(frontend_name)ft %(backend_name)b %(server_name)s %(status_code)ST %(bytes_read)B %(termination_state)tsc %(http_request)r"'
else
	json_before="    log-format '{\"client\":\"%ci:%cp\",\"date\":\"%tr\",\"frontend\":\"%ft\",\"backend\":\"%b\",\"server\":\"%s\",\"status\":%ST,\"bytes\":%B,\"termination\":\"%tsc\",\"request\":%{+Q}r}'"
fi
cat > "$T/existing.cfg" <<CFG
global
    log stdout format raw local0 info
    stats socket "\${SITE_SOCK}" mode 600 level admin
    zero-warning

defaults
    mode http
    log global
    option httplog
    option dontlognull
    timeout connect 5s
    timeout client  30s
    timeout server  30s
    timeout http-request 10s

cache edgecache
    total-max-size 4
    max-age 60

frontend stats
    bind "127.0.0.1:\${STATS_PORT}"
    stats enable
    stats uri /stats
    stats refresh 10s

frontend www
    bind "127.0.0.1:\${HTTP_PORT}"
    bind "127.0.0.1:\${HTTPS_PORT}" ssl crt "\${SITE_CERT}" alpn h2,http/1.1
    http-request redirect scheme https code 301 unless { ssl_fc }
    http-request deny deny_status 403 if { path_beg /admin/ }
    compression algo gzip
    compression type application/json text/plain
    http-request cache-use edgecache
    http-response cache-store edgecache
    http-after-response set-header Strict-Transport-Security "max-age=63072000" if { ssl_fc }
    acl is_static path_beg /static/
    use_backend static if is_static
    default_backend app

frontend partners
    bind "127.0.0.1:\${PARTNERS_PORT}" ssl crt "\${SITE_CERT}"
$json_before
    default_backend partner

backend app
    balance roundrobin
    cookie SRV insert indirect nocache
    option httpchk GET /health
    server app1 "\${APP1_ADDR}" check inter 1s cookie a1
    server app2 "\${APP2_ADDR}" check inter 1s cookie a2
    server app3 "\${APP3_ADDR}" check inter 1s cookie a3
    server app4 "\${APP4_ADDR}" check inter 1s cookie a4

backend static
    server s1 "\${STATIC_ADDR}" check inter 1s

backend partner
    server p1 "\${PARTNER_ADDR}" check inter 1s
CFG

# --- Step 1: the files, from where "make install" put them --------------------
SRC=$T/usr/local/share/ratelimit-spoa/haproxy
D=$T/etc/haproxy/ratelimit
mkdir -p "$SRC" && cp -r "$H/." "$SRC/"     # what make install puts under DATADIR/haproxy
grp=(); [ "$(id -u)" = 0 ] && getent group haproxy >/dev/null && grp=(haproxy)
snippet files | sed -e "s|/usr/local/share/ratelimit-spoa/haproxy|$SRC|g" -e "s|/etc/haproxy/ratelimit|$D|g" \
	-e "$([ ${#grp[@]} -eq 0 ] && echo 's/ -g haproxy//')" > "$T/step1.sh"
out=$(bash -e "$T/step1.sh" 2>&1)
eq "step 1's commands run ($out)" 0 "$?"
for f in ratelimit-edge.cfg spoe-ratelimit.conf ratelimit-agent.cfg routes.map apikeys.map errors/429.json; do
	check "step 1 put $f where the rules and steps 3 and 4 look" test -f "$D/$f"
done
for f in ratelimit-edge.cfg spoe-ratelimit.conf errors; do
	check "step 1: $f is a link to the package's (upgraded with it)" test -L "$D/$f"
done
cat > "$D/routes.map" <<'MAP'
# the site's limited routes
POST/api/orders     orders
GET/api/accounts/   reads
GET/v2/             partner key
MAP
printf 'pk-live-1 PARTNER-1\npk-live-2 PARTNER-2\n' > "$D/apikeys.map"

# --- Step 2: from ratelimit-edge, the lines, the filters, the log formats ----
# Each frontend with limited routes (www, partners) is written "from
# ratelimit-edge"; the lines go after the bind lines and the rules that
# answer without a backend; then "filter cache <name>" for each cache-use,
# then "filter compression" if it compresses; cache-use keeps limited routes
# out; the log format gets the limiter's fields (the guide's lines for this
# version). The site's defaults gave these frontends nothing that
# ratelimit-edge and the lines do not (log global, httplog, dontlognull,
# the timeouts): nothing to restate.
if [ "$vmaj" -ge 3 ]; then httplog=log-httplog-3 json=log-json-3; else httplog=log-httplog json=log-json-2.6; fi
snippet "$httplog" > "$T/log-httplog.txt"
snippet "$json" > "$T/log-json.txt"
snippet frontend-lines > "$T/lines.txt"
snippet cors-preflight > "$T/cors-preflight.txt"
merge() {   # merge FILTERS(1|0) < existing > merged
	awk -v blk="$T/lines.txt" -v filters="$1" \
		-v httplog="$T/log-httplog.txt" -v json="$T/log-json.txt" -v cors="$T/cors-preflight.txt" '
	function flush(   i, last, c, caches, comp) {
		if (!n) return
		if (name == "www" || name == "partners") {
			last = 0; caches = ""; comp = 0
			for (i = 1; i <= n; i++) {
				if (L[i] ~ /^    (bind|http-request (redirect|deny|tarpit|return|auth)) /) last = i
				if (L[i] ~ /^    http-request cache-use /) { split(L[i], c, " "); caches = caches " " c[3] }
				if (L[i] ~ /^    compression /) comp = 1
			}
			for (i = 1; i <= n; i++) {
				if (L[i] ~ /^frontend /) { print L[i] " from ratelimit-edge"; continue }
				if (L[i] ~ /^    log-format /) { getline l < json; close(json); print l; continue }
				if (L[i] ~ /^    http-request cache-use /) { print L[i] " if !{ var(txn.rl_action) -m found }"; continue }
				print L[i]
				if (i == last) {
					if (name == "www") { getline l < httplog; close(httplog); print l }
					if (name == "www") { getline l < cors; close(cors); print l }
					while ((getline l < blk) > 0) print l; close(blk)
					if (filters) {
						split(caches, c, " "); for (j in c) print "    filter cache " c[j]
						if (comp) print "    filter compression"
					}
				}
			}
		} else for (i = 1; i <= n; i++) print L[i]
		n = 0
	}
	/^[a-z]/ { flush(); name = ($1 == "frontend") ? $2 : "" }
	{ L[++n] = $0 }
	END { flush() }'
}
merge 1 < "$T/existing.cfg" > "$T/haproxy.cfg"
merge 0 < "$T/existing.cfg" > "$T/haproxy-nofilter.cfg"
eq "the lines went into www and partners" 2 "$(grep -c '=== ratelimit-spoa: the lines' "$T/haproxy.cfg")"
eq "www and partners take ratelimit-edge" "frontend www from ratelimit-edge|frontend partners from ratelimit-edge" \
	"$(grep -E '^frontend (www|partners)' "$T/haproxy.cfg" | paste -sd'|')"
check "www: the redirect comes before the lines" \
	test "$(grep -n 'redirect scheme https' "$T/haproxy.cfg" | cut -d: -f1)" -lt "$(grep -n -m1 '=== ratelimit-spoa: the lines' "$T/haproxy.cfg" | cut -d: -f1)"
eq "www: filter cache, then filter compression, after the lines" \
	"filter spoe|filter cache edgecache|filter compression" \
	"$(awk '/^frontend www/{f=1} /^frontend partners/{f=0} f' "$T/haproxy.cfg" | sed 's/#.*//' | grep -o 'filter [a-z]*\( [a-z]*\)\{0,1\}' | sed 's/ engine$//' | paste -sd'|')"

# --- Step 4 (the agent and the drop-in's settings) and step 3 (-f agent file) --
start_redis
AGENT_PORT=$(free_port)
start_agent "$E2E_REDIS_TIMEOUT
policy orders 3/1m
policy reads 100/1m
policy partner 2/1m"
# The drop-in of step 4, its paths moved into $T: its Environment= lines
# (the agent's address and a loaded machine's decision budget are the
# test's own), the agent file its EXTRAOPTS loads, its ExecStartPre check.
snippet drop-in | sed -e "s|/etc/haproxy/ratelimit|$D|g" -e "s|/etc/haproxy/haproxy.cfg|$T/haproxy.cfg|g" -e "s|/usr/sbin/ratelimit-spoa|$AGENT|g" \
	-e "s|/etc/ratelimit-spoa/ratelimit-spoa.conf|$T/agent.conf|g" > "$T/override.conf"
sed -n 's/^Environment=/export /p' "$T/override.conf" > "$T/dropin.env"
out=$(bash -c "$(sed -n 's/^ExecStartPre=//p' "$T/override.conf")" 2>&1)
eq "the drop-in's ExecStartPre (ratelimit-spoa -c --routes) passes ($out)" 0 "$?"
# shellcheck disable=SC1091
. "$T/dropin.env"
AGENT_CFG=$(sed -n 's/.* -f \([^ ]*\).*/\1/p' <<<"$EXTRAOPTS")
eq "EXTRAOPTS loads the agent file step 1 copied" "$D/ratelimit-agent.cfg" "$AGENT_CFG"
# Debian's unit runs "haproxy -f $CONFIG ... $EXTRAOPTS", $CONFIG split at spaces.
eq "CONFIG loads ratelimit-edge.cfg, then the site's haproxy.cfg" "$D/ratelimit-edge.cfg -f $T/haproxy.cfg" "$CONFIG"
# The identity provider: its key where the drop-in names it, tokens with
# its kid, issuer and audience.
jwt_setup
mkdir -p "$(dirname "$RL_JWT_KEY1")" && cp "$T/jwt/jwt-public.pem" "$RL_JWT_KEY1"
mint() { mint_token "$1" --kid "$RL_JWT_KID1" --iss "$RL_JWT_ISSUER" --aud "$RL_JWT_AUDIENCE" "${@:2}"; }
site_env() {   # the drop-in's settings, and the site's own
	. "$T/dropin.env"
	export RL_AGENT_ADDR=127.0.0.1:$AGENT_PORT RL_SPOE_TIMEOUT=2s SITE_CERT=$T/pki/site.bundle
	local i v; for i in 1 2 3 4; do v=APP${i}_PORT; export "APP${i}_ADDR=127.0.0.1:${!v}"; done
	export STATIC_ADDR=127.0.0.1:$STATIC_PORT PARTNER_ADDR=127.0.0.1:$PARTNER_PORT
}
hcheck() {   # hcheck CFG: haproxy -c -dW as the unit runs it, CFG in haproxy.cfg's place
	# shellcheck disable=SC2086
	( site_env; SITE_SOCK=$T/check.sock STATS_PORT=1 HTTP_PORT=2 HTTPS_PORT=3 PARTNERS_PORT=4 \
		"$HAPROXY" -c -dW -f ${CONFIG/$T\/haproxy.cfg/$1} -f "$AGENT_CFG" 2>&1 )
}
out=$(hcheck "$T/existing.cfg")
eq "the edge as it was passes haproxy -c -dW ($out)" 0 "$?"
out=$(hcheck "$T/haproxy.cfg")
eq "haproxy -c -dW on the merged config passes" 0 "$?"
check "haproxy -c prints no warning or alert ($out)" test -z "$(grep -E 'WARNING|ALERT' <<<"$out")"
out=$(hcheck "$T/haproxy-nofilter.cfg")
check "without the filter lines, haproxy -c refuses the config" test -n "$(grep -i 'explicit filter' <<<"$out")"

for n in A B; do
	for p in STATS HTTP HTTPS PARTNERS; do printf -v "${p}_$n" '%s' "$(free_port)"; done
	s=STATS_$n h=HTTP_$n t=HTTPS_$n p=PARTNERS_$n
	( site_env; export SITE_SOCK=$T/site-$n.sock STATS_PORT=${!s} HTTP_PORT=${!h} HTTPS_PORT=${!t} PARTNERS_PORT=${!p}
	  [ "$n" = B ] && export RL_FORWARD_API_KEY=yes
	  # shellcheck disable=SC2086
	  exec "$HAPROXY" -db -f $CONFIG -f "$AGENT_CFG" ) >>"$T/haproxy-$n.log" 2>&1 &
	t_track $!
	wait_port "${!h}" && wait_port "${!t}" && wait_port "${!p}" || fail "merged haproxy $n did not start"
done
get() {   # get URL [curl args]: RSP_STATUS, $T/rsp.hdr, $T/rsp.body
	local url=$1; shift
	RSP_STATUS=$(curl -s -k -m 10 "$@" -D "$T/rsp.hdr" -o "$T/rsp.body" -w '%{http_code}' "$url")
}
backend_saw() {   # backend_saw NAME-REGEX: the header lines the backend echoed, names in lower case
	jq -r .headers "$T/rsp.body" | tr -d '\r' | sed -E 's/^([^:]*):/\L\1:/' | grep -E "^$1:" | paste -sd'|'
}
tok=$(mint ACC-7)

# --- :80 redirects before anything is limited -------------------------------
for with in no yes; do
	args=(); [ "$with" = yes ] && args=(-H "Authorization: Bearer $tok")
	get "http://127.0.0.1:$HTTP_A/api/orders" -X POST "${args[@]}"
	eq ":80, POST /api/orders, token: $with: 301" 301 "$RSP_STATUS"
	eq ":80: to https" "https://127.0.0.1:$HTTP_A/api/orders" "$(rsp_hdr Location)"
	eq ":80: no RateLimit header" "" "$(rsp_hdr RateLimit-Policy)"
done
get "http://127.0.0.1:$HTTP_B/api/accounts/1"
eq ":80, GET on a limited route without a token: 301, not 401" 301 "$RSP_STATUS"
eq ":80: nothing counted in Redis" 0 "$(counted_keys)"

# --- Paths a backend could read as a limited one: refused before the lookup --
for p in /%61pi/accounts/1 //api/accounts/1 /api/x/../accounts/1 /api/./accounts/1 /api/%2561ccounts/1x; do
	get "https://127.0.0.1:$HTTPS_A$p" --path-as-is
	case $p in *%25*) want=200 ;; *) want=400 ;; esac   # %25 is "%": decoded once, no route
	eq "path $p: $want" "$want" "$RSP_STATUS"
done
get "https://127.0.0.1:$HTTPS_A/api/accounts/a%20b" --path-as-is
eq "a path with a needed escape (%20) goes on to the limiter: 401 without a token" 401 "$RSP_STATUS"
eq "non-canonical paths: nothing counted in Redis" 0 "$(counted_keys)"
get "https://127.0.0.1:$HTTPS_A/api/orders" -X OPTIONS -H "Origin: https://app.example.com" \
	-H "Access-Control-Request-Method: POST" -H "Access-Control-Request-Headers: authorization"
eq "CORS preflight on a limited path: 204 before the decision" 204 "$RSP_STATUS"
eq "CORS preflight: Access-Control-Allow-Origin" "https://app.example.com" "$(rsp_hdr Access-Control-Allow-Origin)"
get "https://127.0.0.1:$HTTPS_A/api/orders" -X OPTIONS -H "Origin: https://app.example.com"
eq "OPTIONS that is no preflight, on a limited path: 401" 401 "$RSP_STATUS"
eq "OPTIONS: nothing counted in Redis" 0 "$(counted_keys)"

# --- Over TLS: one window for both instances --------------------------------
statuses=
for n in A B A B; do
	v=HTTPS_$n
	get "https://127.0.0.1:${!v}/api/orders" -X POST -H "Authorization: Bearer $tok"
	statuses="$statuses $RSP_STATUS"
	eq "TLS $n: HSTS ($RSP_STATUS)" "max-age=63072000" "$(rsp_hdr Strict-Transport-Security)"
done
eq "POST /api/orders over TLS alternating A/B: 3 pass, then 429" " 200 200 200 429" "$statuses"
check "429: Retry-After is a number of seconds ($(rsp_hdr Retry-After))" grep -Eq '^[0-9]+$' <<<"$(rsp_hdr Retry-After)"
eq "429: RateLimit-Policy" '"orders";q=3;w=60' "$(rsp_hdr RateLimit-Policy)"
check "429: RateLimit ($(rsp_hdr RateLimit))" grep -Eq '^"orders";r=0;t=[0-9]+$' <<<"$(rsp_hdr RateLimit)"
eq "429: a problem document" application/problem+json "$(rsp_hdr Content-Type)"
get "https://127.0.0.1:$HTTPS_B/api/orders" -X POST
eq "TLS, no identity: 401" 401 "$RSP_STATUS"
get "https://127.0.0.1:$HTTPS_B/api/orders" -X POST -H "Authorization: Bearer $(mint ACC-7 --aud https://other-api.example.com)"
eq "a token the provider minted for another API: 401" 401 "$RSP_STATUS"
eq "another API's token: why" invalid-audience "$(jq -r .detail "$T/rsp.body")"
eq "401: HSTS" "max-age=63072000" "$(rsp_hdr Strict-Transport-Security)"

# --- The site's own features, still working ---------------------------------
get "https://127.0.0.1:$HTTPS_A/admin/x" -H "Authorization: Bearer $tok"
eq "the site's deny still answers first: 403" 403 "$RSP_STATUS"
get "https://127.0.0.1:$HTTPS_A/api/accounts/1" -H "Authorization: Bearer $(mint ACC-8)" --compressed \
	-H "X-API-Key: pk-live-1" -H "X-Account: VICTIM"
eq "limited GET over TLS: 200" 200 "$RSP_STATUS"
eq "limited GET: compressed" gzip "$(rsp_hdr Content-Encoding)"
eq "limited GET: RateLimit" '"reads";r=99;t=60' "$(rsp_hdr RateLimit)"
eq "limited GET: the backend sees the verified account only" "x-account: ACC-8" "$(backend_saw x-account)"
eq "limited GET: the backend sees no X-API-Key" "" "$(backend_saw x-api-key)"
cookie=$(rsp_hdr Set-Cookie)
check "cookie stickiness: the app backend set SRV ($cookie)" grep -q '^SRV=a[1-4]' <<<"$cookie"
get "https://127.0.0.1:$HTTPS_B/api/accounts/1" -H "Authorization: Bearer $(mint ACC-8)" -H "Cookie: SRV=a3"
eq "cookie stickiness: SRV=a3 goes to app3" app3 "$(jq -r .app "$T/rsp.body")"

ids=
for n in A A; do
	v=HTTPS_$n
	get "https://127.0.0.1:${!v}/static/app.js" --compressed -H "X-Account: VICTIM" -H "X_Account: VICTIM"
	eq "unlimited /static/ over TLS: 200" 200 "$RSP_STATUS"
	eq "unlimited /static/: compressed" gzip "$(rsp_hdr Content-Encoding)"
	eq "unlimited /static/: no RateLimit header" "" "$(rsp_hdr RateLimit-Policy)"
	eq "unlimited /static/: HSTS" "max-age=63072000" "$(rsp_hdr Strict-Transport-Security)"
	ids="$ids $(jq -r .id "$T/rsp.body")"
done
read -r id1 id2 <<<"$ids"
check "unlimited /static/: the second answer came from the cache ($ids)" test -n "$id1" -a "$id1" = "$id2"
get "https://127.0.0.1:$HTTPS_B/static/x.css" -H "X-Account: VICTIM" -H "X_Account: VICTIM"
eq "unlimited route, forged X-Account: the backend sees none" "" "$(backend_saw 'x[-_]account')"

get "http://127.0.0.1:$STATS_A/stats;csv"
eq "the stats frontend answers" 200 "$RSP_STATUS"
check "stats: be_ratelimit_agent is UP" grep -q '^be_ratelimit_agent,agent1,.*,UP,' "$T/rsp.body"

# --- The partners frontend: API keys ----------------------------------------
get "https://127.0.0.1:$PARTNERS_A/v2/items" -H "X-API-Key: pk-live-1"
eq "partners, API key: 200" 200 "$RSP_STATUS"
eq "partners: the account the key maps to" "x-account: PARTNER-1" "$(backend_saw x-account)"
eq "partners: the backend sees no X-API-Key" "" "$(backend_saw x-api-key)"
get "https://127.0.0.1:$PARTNERS_B/v2/items" -H "X-API-Key: pk-live-2"
eq "RL_FORWARD_API_KEY set (instance B): the backend gets X-API-Key" "x-api-key: pk-live-2" "$(backend_saw x-api-key)"
get "https://127.0.0.1:$PARTNERS_A/v1/catalog" -H "X-API-Key: pk-live-1"
eq "partners, unlimited route: X-API-Key passes as sent" "x-api-key: pk-live-1" "$(backend_saw x-api-key)"
for _ in 1 2; do get "https://127.0.0.1:$PARTNERS_A/v2/items" -H "X-API-Key: pk-live-1"; done
eq "partners: the third request in the minute is 429" 429 "$RSP_STATUS"

# --- The limiter 503: the agent stopped -------------------------------------
stop_agent
get "https://127.0.0.1:$HTTPS_A/api/orders" -X POST -H "Authorization: Bearer $(mint ACC-9)"
eq "agent stopped: 503" 503 "$RSP_STATUS"
eq "agent stopped: the problem's reason" no-decision "$(jq -r .reason "$T/rsp.body")"

# --- The logs: the limiter's fields in the site's formats --------------------
# (a log line is written when the stream ends: wait until the last one shows)
for _ in $(seq 50); do grep -q ' 503 .*policy=orders' "$T/haproxy-A.log" && break; sleep 0.1; done
l429=$(grep -h ' 429 ' "$T/haproxy-A.log" "$T/haproxy-B.log" | grep 'policy=orders' | head -1)
check "httplog: the 429 logs rl=deny reason=- policy=orders auth=- key= spoe_err=- spoe_ms= ($l429)" \
	grep -Eq ' www~ www/<NOSRV> .* 429 .* rl=deny reason=- policy=orders auth=- key=jwt:ACC-[0-9]+ spoe_err=- spoe_ms=[0-9]+$' <<<"$l429"
l503=$(grep -h ' 503 ' "$T/haproxy-A.log" | grep 'policy=orders' | head -1)
check "httplog: the limiter 503 logs rl=- reason=no-decision, the account and HAProxy's SPOE error ($l503)" \
	grep -Eq ' 503 .* rl=- reason=no-decision policy=orders auth=- key=jwt:ACC-9 spoe_err=[0-9]+ spoe_ms=[0-9]+$' <<<"$l503"
l401=$(grep -h ' 401 ' "$T/haproxy-B.log" | head -1)
check "httplog: the 401 logs why ($l401)" grep -Eq ' 401 .* rl=- reason=- policy=orders auth=missing-bearer-token key=- spoe_err=- spoe_ms=-$' <<<"$l401"
j429=$(grep -h '^{' "$T/haproxy-A.log" | jq -c 'select((.status // .status_code) == 429)' 2>/dev/null | head -1)
eq "JSON: the 429 logs rl, policy, key and spoe_err ($j429)" "deny partner key:PARTNER-1 -" \
	"$(jq -r '"\(.rl) \(.policy) \(.key) \(.spoe_err | if . == "" then "-" else . end)"' <<<"$j429")"
j200=$(grep -h '^{' "$T/haproxy-A.log" | jq -c 'select((.status // .status_code) == 200 and .rl == "allow")' 2>/dev/null | head -1)
check "JSON: an allowed request logs rl=allow ($j200)" test -n "$j200"
t_done
