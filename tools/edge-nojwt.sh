#!/usr/bin/env bash
# edge-nojwt.sh CFG: CFG (an edge config such as haproxy/haproxy.cfg, or
# edge-alone.sh's output) with the identity taken from a plain
# X-Bench-Account header instead of a verified RS256 token, on stdout: the
# limiter's overhead alone, not hidden behind the JWT check. A bench-only
# variant, never a deployment: make bench's no-JWT rows (tools/bench.sh)
# and tools/bench-haproxy-ir.sh. Exits 1 when the JWT rules it rewrites are
# not found (the layout changed under it).
set -u
out=$(sed -e 's|^\([[:space:]]*\)http-request set-var(txn.auth_error) str(multiple-authorization-headers) if rl_jwt .*$|\1http-request set-var(txn.account) req.hdr(x-bench-account) if rl_jwt|' \
	-e '/ if rl_jwt !rl_autherr/d' -e '/http_auth_bearer if rl_jwt$/d' "$1") || exit 1
if ! grep -q 'req.hdr(x-bench-account)' <<<"$out" || grep -q 'http_auth_bearer' <<<"$out"; then
	echo "edge-nojwt.sh: $1: the JWT rules were not where expected" >&2
	exit 1
fi
printf '%s\n' "$out"
