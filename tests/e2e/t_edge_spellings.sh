#!/usr/bin/env bash
# Spellings of a limited path that common backends read as that path, on the
# demo edge (haproxy/haproxy.cfg, the shipped routes.map), on the route of
# every identity kind (jwt, key, cert, jwt|ip), in the middle and at the end
# of the path: a ";" path parameter (Tomcat, Spring), a "\" (Windows
# servers), upper case where lower case would take another line (IIS).
# All 400 before any lookup counts; a mixed-case path that stays on its
# line passes. RL_ALLOW_PATH_PARAMS decides on the path without the
# parameters; RL_ALLOW_MIXED_CASE lets upper case through.
. "$(dirname "$0")/../lib.sh"
t_setup
start_edge A
RL_ALLOW_PATH_PARAMS=1 RL_ALLOW_MIXED_CASE=1 start_haproxy B

get() {   # get NAME PATH: the status of a GET without credentials, path as is
	local pv="HAP_PORT_$1"
	curl -s -m 10 --path-as-is -o /dev/null -w '%{http_code}' "http://127.0.0.1:${!pv}$2"
}

keys=$(counted_keys)
for base in /accounts /partner/accounts /internal/accounts /public/search; do
	for p in "$base;x=1/ACC-1001" "$base/ACC-1001;x=1" "$base\\ACC-1001" "$base/ACC-1001\\" \
		"$(tr a-z A-Z <<<"$base")/ACC-1001" "${base%/*}/$(tr a-z A-Z <<<"${base##*/}")/"; do
		eq "GET $p: 400" 400 "$(get A "$p")"
	done
done
eq "the refused spellings reached no window" "$keys" "$(counted_keys)"

# Upper case that stays on its line, or that lower case sends only to the
# default line, is not refused.
eq "GET /accounts/ACC-1001 (upper case after the prefix): 401, its line" 401 "$(get A /accounts/ACC-1001)"
eq "GET /partner/accounts/ACC-1001: 401" 401 "$(get A /partner/accounts/ACC-1001)"
eq "GET /Nowhere (lower case only reaches the default): 404 from the demo" 404 "$(get A /Nowhere)"

# The switches.
eq "RL_ALLOW_PATH_PARAMS: /accounts;x=1/ACC-1001 decided as /accounts/ACC-1001 (401)" 401 "$(get B '/accounts;x=1/ACC-1001')"
eq "RL_ALLOW_PATH_PARAMS: /accounts/ACC-1001;v=2 (401)" 401 "$(get B '/accounts/ACC-1001;v=2')"
eq "RL_ALLOW_MIXED_CASE: /ACCOUNTS/ACC-1001 passes to the default line (404 from the demo)" 404 "$(get B /ACCOUNTS/ACC-1001)"
eq "the switches leave \\ refused" 400 "$(get B '/accounts\ACC-1001')"
t_done
