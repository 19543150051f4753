#!/usr/bin/env bash
# routes.map beyond the listed paths, on the shipped demo edge:
#   the default line "*": a path no line lists (a 404, an alias, the public
#   endpoint) is decided, anonymously, by the client's address, counted
#   across both instances, with RateLimit-* headers; over the limit, 429;
#   an exemption ("GET/healthz -"): never decided, no header, no key;
#   the ip identity: a client-supplied X-Forwarded-For changes nothing, one
#   from a trusted proxy (RL_TRUSTED_PROXIES) names the client, IPv6 counts
#   per /64;
#   the canonical-path refusal still answers 400 before any of it.
. "$(dirname "$0")/../lib.sh"
t_setup
start_edge A B

# Anonymous: no token; the key is ip:<the client's address>.
req A GET /public/status
eq "unlisted path: served" 200 "$RSP_STATUS"
eq "unlisted path: decided on the default line (RateLimit-Policy)" '"anon";q=20;w=1' "$(rsp_hdr RateLimit-Policy)"
check "unlisted path: RateLimit-Remaining present" test -n "$(rsp_hdr RateLimit-Remaining)"
check "unlisted path: the window is the client's address" \
	test -n "$(rcli --scan --pattern 'anon:*ip:127.0.0.1*' | head -1)"
req B GET /no/such/thing
eq "a path no backend serves: 404" 404 "$RSP_STATUS"
eq "a 404 carries the decision too" '"anon";q=20;w=1' "$(rsp_hdr RateLimit-Policy)"

# One address across both instances: 24 requests in one burst, alternating.
rcli flushall >/dev/null
args=()
for i in $(seq 24); do
	if [ $((i % 2)) -eq 1 ]; then args+=(A /public/p$i); else args+=(B /public/p$i); fi
done
req_seq GET "" "${args[@]}"
allowed=$(grep -c '^200 ' "$T/seq.out")
denied=$(grep -c '^429 ' "$T/seq.out")
eq "one address, two instances: 20 of 24 pass (the limit, not 2x)" 20 "$allowed"
eq "one address, two instances: the rest get 429" 4 "$denied"
eq "the 21st request names Retry-After" 1 "$(seq_hdr 21 retry-after)"
eq "request 2 (instance B) counts after request 1 (instance A)" 18 "$(seq_hdr 2 ratelimit-remaining)"

# The burst left 127.0.0.1 denied in the agent's deny cache for its
# Retry-After (1 s): wait it out before asking as that address again.
sleep 1.2

# An exemption: never decided.
rcli flushall >/dev/null
req A GET /healthz
check "exempt /healthz answers 2xx ($RSP_STATUS)" grep -q '^2' <<<"$RSP_STATUS"
eq "exempt /healthz: no RateLimit-Policy" "" "$(rsp_hdr RateLimit-Policy)"
eq "exempt /healthz: nothing counted" 0 "$(counted_keys)"

# An exact key ("?"): /healthz is exempt, /healthzx is not.
req A GET /healthzx
eq "exact key: /healthzx is not /healthz (decided on the default line)" '"anon";q=20;w=1' "$(rsp_hdr RateLimit-Policy)"

# Host-scoped lines come before host-less ones (a copy of the files with one
# more line: /public/ on api.example.com needs a JWT).
cp -r "$HAPROXY_FILES" "$T/hx"
sed -i '1i api.example.com:GET/public/ reads jwt fail=open' "$T/hx/routes.map"
out=$("$AGENT" -c -f "$ROOT/etc/ratelimit-spoa.conf" --routes "$T/hx/routes.map" 2>&1)
eq "the host-scoped map passes --routes ($out)" 0 "$?"
HAPROXY_FILES=$T/hx start_haproxy H
req H GET /public/x "" -H "Host: api.example.com"
eq "host-scoped line: its host takes it (401 without a token)" 401 "$RSP_STATUS"
req H GET /public/x "" -H "Host: API.Example.com:8443"
eq "host-scoped line: Host matched in any case, without the port" 401 "$RSP_STATUS"
req H GET /public/x "" -H "Host: www.example.com"
eq "host-scoped line: another host falls to the host-less lines (anonymous)" 200 "$RSP_STATUS"

# A listed route still takes its own line, not the default.
tok=$(mint_token ACC-R1)
req A GET /accounts/ACC-R1 "$tok"
eq "a listed route keeps its policy" '"reads";q=100;w=60' "$(rsp_hdr RateLimit-Policy)"
req A GET /accounts/ACC-R1
eq "a listed jwt route without a token: 401 (the default line is no way around it)" 401 "$RSP_STATUS"

# jwt|ip: the account with a token (its own policy), the address without,
# 401 for an invalid token (never a quiet downgrade to anonymous).
req A GET /public/search "$tok"
eq "jwt|ip with a token: 200" 200 "$RSP_STATUS"
eq "jwt|ip with a token: the account's policy" '"reads";q=100;w=60' "$(rsp_hdr RateLimit-Policy)"
check "jwt|ip with a token: counted for the account" test -n "$(rcli --scan --pattern 'reads:*jwt:ACC-R1*' | head -1)"
req B GET /public/search
eq "jwt|ip without a token: 200" 200 "$RSP_STATUS"
eq "jwt|ip without a token: the address's policy" '"anon";q=20;w=1' "$(rsp_hdr RateLimit-Policy)"
req A GET /public/search "not.a.token"
eq "jwt|ip with an invalid token: 401" 401 "$RSP_STATUS"

# X-Forwarded-For from an untrusted client is ignored.
rcli flushall >/dev/null
req A GET /public/x "" -H "X-Forwarded-For: 203.0.113.9"
check "untrusted X-Forwarded-For: counted as the connection's address" \
	test -n "$(rcli --scan --pattern '*ip:127.0.0.1*' | head -1)"
eq "untrusted X-Forwarded-For: no window for the forged address" "" "$(rcli --scan --pattern '*203.0.113.9*' | head -1)"

# The same edge behind a trusted balancer (127.0.0.1 listed).
echo "127.0.0.1" > "$T/trusted.lst"
RL_TRUSTED_PROXIES=$T/trusted.lst start_haproxy C
rcli flushall >/dev/null
req C GET /public/x "" -H "X-Forwarded-For: 198.51.100.1, 203.0.113.7"
eq "trusted balancer: served" 200 "$RSP_STATUS"
check "trusted balancer: the last X-Forwarded-For address is the key" \
	test -n "$(rcli --scan --pattern '*ip:203.0.113.7*' | head -1)"
eq "trusted balancer: not the client-written first hop" "" "$(rcli --scan --pattern '*198.51.100.1*' | head -1)"
req C GET /public/x "" -H "X-Forwarded-For: 2001:db8:1:2:aaaa::1"
req C GET /public/x "" -H "X-Forwarded-For: 2001:db8:1:2:bbbb::2"
# (the windows' tagged keys: a new agent also writes 1.0.0's one-window
# key beside each for its first hour, docs/deployment.md)
v6=$(rcli --scan --pattern '*:limit:v1:{*2001:db8:1:2*' | sort -u)
eq "IPv6: two addresses of one /64 share one window" 1 "$(grep -c . <<<"$v6")"
check "IPv6: the key is the /64 prefix ($v6)" grep -q '{ip:2001:db8:1:2::}' <<<"$v6"
req C GET /public/x "" -H "X-Forwarded-For: 2001:db8:1:3::1"
eq "IPv6: another /64 is another window" 2 "$(rcli --scan --pattern '*:limit:v1:{*2001:db8:1:*' | sort -u | grep -c .)"

# Non-canonical spellings are refused before routing (docs/integrate.md).
rcli flushall >/dev/null
for p in '//public/x' '/public/../accounts/ACC-R1' '/%61ccounts/ACC-R1' '/accounts/%2e%2e/x'; do
	req A GET "$p" "$tok" --path-as-is
	eq "non-canonical $p: 400" 400 "$RSP_STATUS"
done
eq "non-canonical paths: nothing counted" 0 "$(counted_keys)"
# A site that silences its logs (set-log-level silent before the limiter's
# lines, option dontlog-normal) still logs the limiter's 401, 429 and 503.
sed -e 's|^    # === ratelimit-spoa: the lines of a frontend|    option dontlog-normal\n    http-request set-log-level silent\n&|' \
	"$HAPROXY_FILES/haproxy.cfg" > "$T/quiet.cfg"
check "the quiet edge config has the site's rules" grep -q 'set-log-level silent' "$T/quiet.cfg"
start_haproxy Q "$T/quiet.cfg"
sleep 1.2   # the bursts above: 127.0.0.1 out of the deny cache
rcli flushall >/dev/null
req Q GET /public/ok
eq "quiet edge: an allowed request passes" 200 "$RSP_STATUS"
req Q GET /accounts/ACC-R1
eq "quiet edge: 401" 401 "$RSP_STATUS"
args=(); for i in $(seq 22); do args+=(Q /public/q$i); done
req_seq GET "" "${args[@]}"
eq "quiet edge: the 21st anonymous request is 429" 429 "$(seq_status 21)"
stop_agent
req Q POST /transfers "$tok"
eq "quiet edge, agent stopped: 503" 503 "$RSP_STATUS"
sleep 0.5
check "quiet edge: the 401 is logged" grep -q '" 401 \| 401 [0-9]* "GET /accounts/ACC-R1' "$T/haproxy-Q.log"
check "quiet edge: a 429 is logged" grep -q ' 429 [0-9]* "GET /public/q' "$T/haproxy-Q.log"
check "quiet edge: the 503 is logged" grep -q ' 503 [0-9]* "POST /transfers' "$T/haproxy-Q.log"
eq "quiet edge: the allowed request stays silent (the site's choice)" 0 "$(grep -c 'GET /public/ok ' "$T/haproxy-Q.log")"
t_done
