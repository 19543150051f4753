#!/usr/bin/env bash
# edge-self.sh CFG: CFG (haproxy/haproxy.cfg, or the output of edge-alone.sh
# or edge-nojwt.sh) answering by itself, on stdout: each "use_backend" of
# the frontend becomes an "http-request return" with the same condition
# (201 for a transfer, 200 for a read), so no request leaves HAProxy for a
# backend. The limiter's rules, the RateLimit headers (http-after-response)
# and the log line stay. The "self-answering" shape of make bench
# (tools/bench.sh): HAProxy answering itself, with and without the limiter,
# which is what a user comparing "HAProxy with and without the limiter"
# sees first; tests/e2e/t_edge_self.sh keeps it working. Exits 1 when a
# use_backend is left or none was found (the layout changed under it).
set -u
cfg=${1:-$(dirname "$0")/../haproxy/haproxy.cfg}
out=$(sed -e 's|^\([[:space:]]*\)use_backend be_transfers \(if .*\)$|\1http-request return status 201 content-type application/json string "{}" \2|' \
	-e 's|^\([[:space:]]*\)use_backend be_accounts[[:space:]]*\(if .*\)$|\1http-request return status 200 content-type application/json string "{}" \2|' \
	"$cfg") || exit 1
if grep -v '^[[:space:]]*#' <<<"$out" | grep -q 'use_backend' \
	|| ! grep -q 'http-request return status 201 content-type application/json string "{}" if' <<<"$out"; then
	echo "edge-self: could not turn the use_backend lines of $cfg into answers (did its layout change?)" >&2
	exit 1
fi
printf '%s\n' "$out"
