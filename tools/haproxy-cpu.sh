#!/usr/bin/env bash
# haproxy-cpu.sh - HAProxy's own CPU (user + system) per request on the
# limited path (haproxy/haproxy.cfg + agent + Redis) against the same edge
# answering without the SPOE filter, as in `make bench` section (c), but only
# that figure, rounds interleaved and the median printed.
#
#   HAPROXY=build/haproxy-3.2/haproxy tools/haproxy-cpu.sh [ROUNDS] [SECS] [CONNS]
#
# Uses the tokens `make bench` minted (build/bench-cache); run that once first.
# Everything on ephemeral 127.0.0.1 ports, stopped by PID at exit. The figures
# include the JWT (RS256) check both sides make; the difference is the limiter.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
rounds=${1:-3} secs=${2:-8} conns=${3:-64}
cache=${BENCH_CACHE:-$ROOT/build/bench-cache}
tokens=$cache/tokens-${BENCH_ACCOUNTS:-10000}.txt
[ -s "$tokens" ] || { echo "haproxy-cpu: no tokens in $cache: run make bench once" >&2; exit 1; }
t_setup
export RL_JWT_PUBKEY=$cache/jwt/jwt-public.pem
start_redis || exit 1
start_agent "$E2E_REDIS_TIMEOUT
$(edge_policies)" || exit 1
start_backend || exit 1
# The edge without the limiter, as make bench's HAProxy alone.
tools/edge-alone.sh haproxy/haproxy.cfg >"$T/haproxy-alone.cfg" || exit 1
start_haproxy alone "$T/haproxy-alone.cfg" || exit 1
start_haproxy full || exit 1
ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
for i in $(seq "$rounds"); do
	for k in alone full; do
		pv=HAP_PID_$k; port=HAP_PORT_$k
		redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
		t0=$(ticks "${!pv}")
		wrk -t 2 -c "$conns" -d "${secs}s" -s tools/bench-wrk.lua \
			"http://127.0.0.1:${!port}/transfers" -- "$tokens" 0 0 >"$T/wrk.out" 2>&1
		t1=$(ticks "${!pv}")
		n=$(awk '/ requests in / { print $1 }' "$T/wrk.out")
		us=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v n="${n:-0}" 'BEGIN { if (n > 0) printf "%.1f", t * 1e6 / hz / n }')
		echo "$k round $i: $n requests, ${us} us of HAProxy CPU per request ($(grep '^STATUS' "$T/wrk.out"))"
		echo "$us" >>"$T/$k.us"
	done
done
med() { sort -g "$T/$1.us" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
echo "HAProxy $("$HAPROXY" -v | awk 'NR == 1 { print $3 }'): alone $(med alone) us, limited $(med full) us per request (median of $rounds)"
