#!/usr/bin/env bash
# edge-alone.sh CFG: CFG (haproxy/haproxy.cfg by default) without the
# limiter, on stdout: the SPOE filter, the agent call, the 503 and 429 that
# act on its answer (and their http-response copies for a drained HTTP/2
# body) and the agent's backend are removed; routes, identity
# checks (401), the rest of the rules and the RateLimit header rules (which
# find nothing to add) stay. "HAProxy alone" in make bench
# (tools/bench.sh) and tools/haproxy-cpu.sh; tests/e2e/t_edge_alone.sh keeps
# it working as the edge's layout changes. Exits 1 when something of the
# limiter is left (the layout changed under it).
set -u
cfg=${1:-$(dirname "$0")/../haproxy/haproxy.cfg}
out=$(sed -e '/^[[:space:]]*filter spoe /d' -e '/send-spoe-group/d' \
	-e '/^[[:space:]]*http-request deny status 503 /d' \
	-e '/^[[:space:]]*http-request deny status 429 /d' \
	-e '/^[[:space:]]*http-request return status 503 /d' \
	-e '/^[[:space:]]*http-request return status 429 /d' \
	-e '/^[[:space:]]*http-response return status 503 /d' \
	-e '/^[[:space:]]*http-response return status 429 /d' \
	-e '/^backend be_ratelimit_agent/,$d' "$cfg") || exit 1
if grep -v '^[[:space:]]*#' <<<"$out" | grep -qE 'filter spoe|send-spoe|status (503|429)|be_ratelimit_agent'; then
	echo "edge-alone: could not strip the limiter out of $cfg (did its layout change?)" >&2
	exit 1
fi
printf '%s\n' "$out"
