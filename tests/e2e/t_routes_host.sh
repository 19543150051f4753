#!/usr/bin/env bash
# routes.map's exact keys ("<METHOD><path>?": that path only) and host-scoped
# lines ("<host>:<key>", looked up before the host-less lines, the Host in
# any case and with any port), on the demo edge with a map of its own, and
# the canonical-path refusal still answering 400 before any of them.
. "$(dirname "$0")/../lib.sh"
t_setup

mkdir -p "$T/hap"
cp -r "$ROOT/haproxy/." "$T/hap/"
cat > "$T/hap/routes.map" <<'MAP'
GET/status?                   -
api.example.com:GET/accounts/ -
GET/accounts/open?            -
GET/accounts/                 reads     jwt  fail=open
POST/transfers                transfer
api.example.com:*             reads     ip   fail=open
*                             anon      ip   fail=open
MAP
POLICIES="policy transfer 3/1s
policy reads 100/1m on-redis-error=allow
policy anon 60/1m on-redis-error=allow"
printf 'listen 127.0.0.1:1\nredis redis://127.0.0.1:1/0\n%s\n' "$POLICIES" > "$T/check.conf"
check "the agent accepts the map (--routes)" "$AGENT" -c -f "$T/check.conf" --routes "$T/hap/routes.map"

HAPROXY_FILES=$T/hap
jwt_setup
start_redis
start_agent "$E2E_REDIS_TIMEOUT
$POLICIES"
start_backend
start_haproxy A

# policy_of: the policy named by the last response's RateLimit-Policy.
policy_of() { rsp_hdr RateLimit-Policy | sed -n 's/^"\([^"]*\)".*/\1/p'; }

# --- exact keys -----------------------------------------------------------------
keys=$(counted_keys)
req A GET /status ""
eq "exact exempt /status: no RateLimit-Policy" "" "$(rsp_hdr RateLimit-Policy)"
req A GET /status "" -G -d probe=1
eq "exact exempt /status?probe=1 (a query string is not the path): no RateLimit-Policy" "" "$(rsp_hdr RateLimit-Policy)"
req A GET /accounts/open ""
eq "exact exempt /accounts/open: served without identity" 200 "$RSP_STATUS"
eq "nothing of these reached Redis" "$keys" "$(counted_keys)"
req A GET /status/more ""
eq "/status/more is not /status: the default line decides it" anon "$(policy_of)"
req A GET /accounts/openx ""
eq "/accounts/openx is not /accounts/open: GET/accounts/'s identity (401)" 401 "$RSP_STATUS"
req A GET /accounts/open/x ""
eq "/accounts/open/x is not /accounts/open: 401" 401 "$RSP_STATUS"

# --- host-scoped lines ------------------------------------------------------------
req A GET /accounts/ACC-H1 "" -H "Host: API.Example.com:8443"
eq "api.example.com's exemption (Host in any case, any port): served" 200 "$RSP_STATUS"
eq "api.example.com's exemption: no RateLimit-Policy" "" "$(rsp_hdr RateLimit-Policy)"
req A GET /accounts/ACC-H1 "" -H "Host: www.example.com"
eq "another Host: the host-less line (401 without a token)" 401 "$RSP_STATUS"
req A GET /accounts/ACC-H1 "" -H "Host: xapi.example.com"
eq "a Host that only ends like it: the host-less line" 401 "$RSP_STATUS"
req A GET /nowhere "" -H "Host: api.example.com"
eq "api.example.com's own default line" reads "$(policy_of)"
req A GET /nowhere "" -H "Host: www.example.com"
eq "another Host: the host-less default line" anon "$(policy_of)"
req A GET /nowhere "" -H "Host: api.example.com.evil"
eq "a Host that only begins like it: the host-less default line" anon "$(policy_of)"

# --- the canonical-path refusal comes first -----------------------------------------
keys=$(counted_keys)
for p in //status /%73tatus /x/../status /accounts/%6fpen //accounts/open; do
	RSP_STATUS=$(curl -s -m 10 --path-as-is -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HAP_PORT_A$p")
	eq "GET $p: 400" 400 "$RSP_STATUS"
done
eq "the refused spellings reached no window" "$keys" "$(counted_keys)"
t_done
