#!/usr/bin/env bash
# ratelimit-spoa -c --routes on a map whose GET line, on a write path's
# prefix, would decide PUT, PATCH and DELETE (the block's method fallback)
# while the POST line limits the path more strictly: a warning naming
# file:line and the methods, the map still accepted; the shipped map and a
# map naming every method: no warning.
. "$(dirname "$0")/../lib.sh"
t_setup
printf '%s\n' "listen 127.0.0.1:1" "redis redis://127.0.0.1:1/0" "policy orders 10/1m" "policy reads 100/1m on-redis-error=allow" > "$T/agent.conf"
printf '%s\n' "POST/api/v1/orders orders key" "GET/api/v1/orders reads ip fail=open" > "$T/routes.map"
out=$("$AGENT" -c -f "$T/agent.conf" --routes "$T/routes.map" 2>&1); rc=$?
eq "-c --routes accepts the map (a warning, not an error)" 0 "$rc"
eq "-c --routes warns with file:line and the methods" \
	"$T/routes.map:2: warning: route 'GET/api/v1/orders' (by address) also decides PUT, PATCH, DELETE and methods no line names on its path, which line 1 ('POST/api/v1/orders') limits more strictly (a credential): give them lines of their own" \
	"$(grep warning <<<"$out")"
printf '%s\n' "PUT/api/v1/orders orders key" "PATCH/api/v1/orders orders key" "DELETE/api/v1/orders orders key" >> "$T/routes.map"
out=$("$AGENT" -c -f "$T/agent.conf" --routes "$T/routes.map" 2>&1); rc=$?
eq "every method named: accepted" 0 "$rc"
eq "every method named: no warning" "" "$(grep warning <<<"$out")"
out=$("$AGENT" -c -f "$ROOT/etc/ratelimit-spoa.conf" --routes "$ROOT/haproxy/routes.map" 2>&1)
eq "the shipped map: no warning" "" "$(grep warning <<<"$out")"
t_done
