#!/usr/bin/env bash
# docs/integrate.md, followed step by step on an existing configuration
# written here: two frontends, three backends, a route that must stay
# unlimited. The block (haproxy/ratelimit-block.cfg) is pasted into both
# frontends after their bind lines, the agent backend
# (haproxy/ratelimit-agent.cfg) appended, the SPOE file, errors and a
# routes.map of the site's own put into RL_HAPROXY_DIR. Then:
#   haproxy -c is clean; the limited route is limited across two instances;
#   the unlimited routes are untouched (no RateLimit header, no agent call).
. "$(dirname "$0")/../lib.sh"
t_setup
H=$HAPROXY_FILES   # the tree's haproxy/ unless told (tests/lib.sh)

# --- The site as it was ------------------------------------------------------
ORDERS_PORT=$(free_port); STATIC_PORT=$(free_port); PARTNER_PORT=$(free_port)
cat > "$T/servers.cfg" <<CFG
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend orders_app
    bind 127.0.0.1:$ORDERS_PORT
    http-request return status 201 content-type application/json lf-string '{"app":"orders","account":"%[req.hdr(x-account)]","headers":"%[req.hdrs,json(utf8s)]"}'
frontend static_app
    bind 127.0.0.1:$STATIC_PORT
    http-request return status 200 content-type application/json lf-string '{"app":"static","headers":"%[req.hdrs,json(utf8s)]"}'
frontend partner_app
    bind 127.0.0.1:$PARTNER_PORT
    http-request return status 200 content-type application/json lf-string '{"app":"partner","account":"%[req.hdr(x-account)]"}'
CFG
"$HAPROXY" -db -f "$T/servers.cfg" >>"$T/servers.log" 2>&1 &
t_track $!
wait_port "$ORDERS_PORT" && wait_port "$STATIC_PORT" && wait_port "$PARTNER_PORT" || fail "app servers did not start"

cat > "$T/existing.cfg" <<'CFG'
global
    log stdout format raw local0 info
    stats socket "${SITE_SOCK}" mode 600 level admin
    # What the pasted block needs in global with RL_DRAIN_LUA set
    # (docs/integrate.md).
.if defined(RL_DRAIN_LUA)
    lua-load-per-thread "${RL_DRAIN_LUA-ratelimit-drain.lua}"
.endif

defaults
    mode http
    log global
    option httplog
    timeout connect 5s
    timeout client  30s
    timeout server  30s

frontend www
    bind "127.0.0.1:${WWW_PORT}"
    acl is_static path_beg /static/
    use_backend static if is_static
    default_backend orders

frontend partners
    bind "127.0.0.1:${PARTNERS_PORT}"
    default_backend partner

backend orders
    server o1 "${ORDERS_ADDR}"

backend static
    server s1 "${STATIC_ADDR}"

backend partner
    server p1 "${PARTNER_ADDR}"
CFG

# --- Step 1: the files, in their own directory -------------------------------
D=$T/etc-haproxy-ratelimit
mkdir -p "$D"
cp -r "$H/spoe-ratelimit.conf" "$H/ratelimit-drain.lua" "$H/errors" "$D/"
cat > "$D/routes.map" <<'MAP'
# the site's limited routes; everything else stays as it was
POST/api/orders     orders
POST/api/bulk       orders  jwt 2
GET/v2/             partner key
MAP
printf 'pk-live-1 PARTNER-1\n' > "$D/apikeys.map"

# --- Step 2: the block into each frontend, after its bind lines --------------
# --- Step 3: the agent backend at the end ------------------------------------
awk -v block="$H/ratelimit-block.cfg" '
	{ print }
	/^frontend / { infe = 1; next }
	infe && /^    bind / { while ((getline l < block) > 0) print l; close(block); infe = 0 }
' "$T/existing.cfg" > "$T/haproxy.cfg"
cat "$H/ratelimit-agent.cfg" >> "$T/haproxy.cfg"
eq "the block went into both frontends" 2 "$(grep -c '=== ratelimit-spoa block' "$T/haproxy.cfg")"

# --- Step 4: the agent, its policies, and the settings HAProxy needs ---------
start_redis
AGENT_PORT=$(free_port)
start_agent "$E2E_REDIS_TIMEOUT
policy orders 3/1m
policy partner 100/1m"
out=$("$AGENT" -c -f "$T/agent.conf" --routes "$D/routes.map" 2>&1)
eq "the agent's check accepts the site's routes ($out)" 0 "$?"
jwt_setup
site_env() {   # what the systemd drop-in's Environment= lines hold
	export RL_HAPROXY_DIR=$D RL_JWT_PUBKEY=$T/jwt/jwt-public.pem RL_APIKEYS_MAP=$D/apikeys.map
	export RL_AGENT_ADDR=127.0.0.1:$AGENT_PORT RL_SPOE_TIMEOUT=2s
	export ORDERS_ADDR=127.0.0.1:$ORDERS_PORT STATIC_ADDR=127.0.0.1:$STATIC_PORT PARTNER_ADDR=127.0.0.1:$PARTNER_PORT
}
out=$(site_env; SITE_SOCK=$T/check.sock WWW_PORT=1 PARTNERS_PORT=2 "$HAPROXY" -c -dW -f "$T/haproxy.cfg" 2>&1)
eq "haproxy -c -dW on the merged config passes" 0 "$?"
check "haproxy -c prints no warning or alert ($out)" test -z "$(grep -E 'WARNING|ALERT' <<<"$out")"

# --- Two instances of the merged config ---------------------------------------
for n in A B; do
	w=$(free_port); p=$(free_port)
	( site_env; export SITE_SOCK=$T/site-$n.sock WWW_PORT=$w PARTNERS_PORT=$p
	  exec "$HAPROXY" -db -f "$T/haproxy.cfg" ) >>"$T/haproxy-$n.log" 2>&1 &
	t_track $!
	printf -v "WWW_$n" '%s' "$w"; printf -v "PARTNERS_$n" '%s' "$p"
	wait_port "$w" && wait_port "$p" || fail "merged haproxy $n did not start"
done
get() {   # get URL [curl args]: RSP_STATUS, $T/rsp.hdr, $T/rsp.body
	local url=$1; shift
	RSP_STATUS=$(curl -s -m 10 "$@" -D "$T/rsp.hdr" -o "$T/rsp.body" -w '%{http_code}' "$url")
}

# The limited route, limited across both instances (one window in Redis).
tok=$(mint_token ACC-7)
statuses=
for n in A B A B; do
	v=WWW_$n
	get "http://127.0.0.1:${!v}/api/orders" -X POST -H "Authorization: Bearer $tok"
	statuses="$statuses $RSP_STATUS"
done
eq "POST /api/orders alternating A/B: 3 pass, then 429" " 201 201 201 429" "$statuses"
eq "429: RateLimit-Policy from the agent" '"orders";q=3;w=60' "$(rsp_hdr RateLimit-Policy)"
eq "429: a problem document" application/problem+json "$(rsp_hdr Content-Type)"
get "http://127.0.0.1:$WWW_A/api/orders" -X POST
eq "the limited route wants an identity: 401" 401 "$RSP_STATUS"
get "http://127.0.0.1:$WWW_A/api/orders"
eq "another method on the limited path wants it too (GET): 401" 401 "$RSP_STATUS"
get "http://127.0.0.1:$WWW_B/api/bulk" -X POST -H "Authorization: Bearer $(mint_token ACC-8)"
eq "a route with cost 2 in routes.map: 201" 201 "$RSP_STATUS"
eq "a route with cost 2 in routes.map takes 2 units" '"orders";r=1;t=60' "$(rsp_hdr RateLimit)"

# The unlimited routes: as before the merge, no identity asked, no agent call.
# (the windows only: the agents flush denial counts for ctl top-denied to
# a minute's key once a second, whenever that second falls)
limit_keys() { rcli --scan --pattern '*:limit:*' | wc -l; }
keys_before=$(limit_keys)
apps=
for url in "http://127.0.0.1:$WWW_A/static/logo.png" "http://127.0.0.1:$WWW_B/static/app.js" \
	"http://127.0.0.1:$WWW_A/api/catalog" "http://127.0.0.1:$PARTNERS_B/v1/catalog"; do
	get "$url"
	check "unlimited $url: 2xx without a token ($RSP_STATUS)" grep -q '^2' <<<"$RSP_STATUS"
	eq "unlimited $url: no RateLimit-Limit" "" "$(rsp_hdr RateLimit-Limit)"
	eq "unlimited $url: no RateLimit-Policy" "" "$(rsp_hdr RateLimit-Policy)"
	apps="$apps $(jq -r .app "$T/rsp.body")"
done
eq "the unlimited requests reached their backends as before" " static static orders partner" "$apps"
eq "unlimited requests made no Redis window key" "$keys_before" "$(limit_keys)"

# A forged identity header on an unlimited route never reaches the backend
# (the block removes every incoming X-Account, and names with "_").
get "http://127.0.0.1:$WWW_A/static/x" -H "X-Account: VICTIM" -H "X_Account: VICTIM"
eq "unlimited route, forged X-Account: 200" 200 "$RSP_STATUS"
eq "unlimited route, forged X-Account: the backend sees none" "" \
	"$(jq -r .headers "$T/rsp.body" | grep -i 'account')"

# The second frontend's own limited route, by API key.
get "http://127.0.0.1:$PARTNERS_A/v2/items" -H "X-API-Key: pk-live-1"
eq "partners frontend, GET /v2/ with an API key: 200" 200 "$RSP_STATUS"
eq "partners frontend: the account the key maps to" PARTNER-1 "$(jq -r .account "$T/rsp.body")"
eq "partners frontend: RateLimit from the agent" '"partner";r=99;t=60' "$(rsp_hdr RateLimit)"
t_done
