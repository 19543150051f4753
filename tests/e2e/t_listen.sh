#!/usr/bin/env bash
# The short forms for a "listen" section (which cannot take ratelimit-edge
# with "from") and for a decision on the rewritten path, as
# docs/integrate.md ("A listen section, or a decision after your rewrites")
# writes them: ratelimit-edge.cfg loaded first, a frontend "from
# ratelimit-edge" with ratelimit-frontend.cfg's lines, chained to the
# site's own section over an internal address with the PROXY protocol (the
# client's address goes along).
#   A: frontend (decides on the path as sent) -> listen (rewrites, serves)
#   B: listen (rewrites) -> frontend (decides on the rewritten path)
# Both: haproxy -c -dW clean, 401 without a token, allowed with one (the
# RateLimit headers, the client's address behind the hop), the rewrite seen.
. "$(dirname "$0")/../lib.sh"
t_setup
H=$HAPROXY_FILES
jwt_setup
start_redis
start_agent "$E2E_REDIS_TIMEOUT
$(edge_policies)"
TOKEN=$(mint_token ACC-L1)
# abns names are per host: one of this test's own
SOCK=rlt-$$-$RANDOM

# Form A: the site's listen keeps its rewrite and answers (a server would
# do the same); the frontend in front decides on the path as sent.
cat > "$T/site-a.cfg" <<EOF
$(site_head)

frontend rl_front from ratelimit-edge
    bind "\${RL_BIND}"
$(cat "$H/ratelimit-frontend.cfg")
    default_backend rl_to_site

backend rl_to_site
    server site abns@$SOCK-a send-proxy-v2

listen site
    bind abns@$SOCK-a accept-proxy
    http-request replace-path /v1(/.*) \1
    http-request return status 200 content-type text/plain lf-string "path=%[path] src=%[src]"
EOF

# Form B: the site's listen rewrites and hands over to the frontend, which
# decides on the rewritten path and chooses the servers.
cat > "$T/site-b.cfg" <<EOF
$(site_head)

listen site
    bind "\${RL_BIND}"
    http-request replace-path /v1(/.*) \1
    server rl abns@$SOCK-b send-proxy-v2

frontend rl_front from ratelimit-edge
    bind abns@$SOCK-b accept-proxy
$(cat "$H/ratelimit-frontend.cfg")
    http-request return status 200 content-type text/plain lf-string "path=%[path] src=%[src]"
EOF

for form in a b; do
	out=$(RL_HAPROXY_DIR=$H RL_APIKEYS_MAP=$H/apikeys.map RL_BIND=127.0.0.1:1 \
		"$HAPROXY" -c -dW -f "$H/ratelimit-edge.cfg" -f "$T/site-$form.cfg" -f "$H/ratelimit-agent.cfg" 2>&1); rc=$?
	eq "form ${form^^}: haproxy -c -dW passes ($out)" 0 "$rc"
	check "form ${form^^}: no warning" test -z "$(grep -E 'WARNING|ALERT' <<<"$out")"
	name=${form^^}
	start_haproxy "$name" "$H/ratelimit-edge.cfg" -f "$T/site-$form.cfg" -f "$H/ratelimit-agent.cfg"
done

# A: decided on /accounts/..., then rewritten by the listen.
req A GET /accounts/ACC-L1 ""
eq "A: a limited path without a token: 401 from the frontend" 401 "$RSP_STATUS"
req A GET /accounts/ACC-L1 "$TOKEN"
eq "A: with the token: served by the listen" 200 "$RSP_STATUS"
eq "A: the listen sees the client's address (PROXY protocol)" "path=/accounts/ACC-L1 src=127.0.0.1" "$(cat "$T/rsp.body")"
check "A: RateLimit-Policy on the answer" test -n "$(rsp_hdr RateLimit-Policy)"
req A GET /v1/accounts/ACC-L1 ""
eq "A: /v1/accounts/... is decided as sent (the default line), then rewritten" "path=/accounts/ACC-L1 src=127.0.0.1" "$(cat "$T/rsp.body")"

# B: rewritten by the listen, then decided on /accounts/...
req B GET /v1/accounts/ACC-L1 ""
eq "B: /v1/accounts/... without a token: 401, decided on the rewritten path" 401 "$RSP_STATUS"
req B GET /v1/accounts/ACC-L1 "$TOKEN"
eq "B: with the token: served" 200 "$RSP_STATUS"
eq "B: the frontend sees the rewritten path and the client's address" "path=/accounts/ACC-L1 src=127.0.0.1" "$(cat "$T/rsp.body")"
check "B: RateLimit-Policy on the answer" test -n "$(rsp_hdr RateLimit-Policy)"
check "B: the account's window is in Redis" test -n "$(rcli --scan --pattern '*ACC-L1*' | head -1)"
t_done
