#!/usr/bin/env bash
# bench-module-cpu.sh - redis-server's own CPU per decision, the module's
# RATELIMIT.DECIDE against lua/sliding_window.lua, side by side on one
# server (issue 21's "Redis CPU per decision"; also runs alone).
#
# One redis-server (Debian's, or REDIS_SERVER=...) with module/ratelimit.so
# loaded and the script loaded; redis-cli --pipe feeds it BENCH_CPU_N
# decisions (default 200,000) on 10,000 accounts at 1000/1s (all admitted:
# the windows hold what a busy account holds), as single decisions
# (redis-batch 1) and as batches of 32 (the agent's default), the engines
# alternated, BENCH_CPU_ROUNDS rounds (default 2). Measured: the server's
# user + system CPU (/proc/<pid>/stat) over the feed, divided by the
# decisions; and INFO commandstats usec_per_call. CPU time on a shared box
# drifts: the two engines run alternately so that a drift hits both;
# tools/bench-redis-ir.sh counts instructions, which do not drift.
#
# Prints a table; with BENCH_CPU_TSV=FILE also writes name<TAB>value lines
# (cpu_us_<engine>_b<n>, the median over the rounds).
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=../tests/lib.sh
. tests/lib.sh
t_setup
N=${BENCH_CPU_N:-200000}
ROUNDS=${BENCH_CPU_ROUNDS:-2}
SERVER=${REDIS_SERVER:-redis-server}
MODULE=${BENCH_CPU_MODULE:-$PWD/module/ratelimit.so}
TSV=${BENCH_CPU_TSV:-}
[ -e "$MODULE" ] || { echo "bench-module-cpu: $MODULE not built (make module)" >&2; exit 1; }

PORT=$(free_port)
"$SERVER" --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
	--loadmodule "$MODULE" >"$T/redis.log" 2>&1 &
RPID=$!
t_track "$RPID"
for _ in $(seq 100); do redis-cli -p "$PORT" PING >/dev/null 2>&1 && break; sleep 0.1; done
SHA=$(redis-cli -p "$PORT" SCRIPT LOAD "$(cat lua/sliding_window.lua)")

# feed ENGINE BATCH SEED: RESP for N decisions
feed() {
	python3 - "$SHA" "$@" "$N" <<'PY'
import sys
sha, engine, batch, seed, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
out = sys.stdout.buffer
pre = [b'RATELIMIT.DECIDE'] if engine == 'module' else [b'EVALSHA', sha.encode()]
x = seed
def acc():
    global x
    x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    return (x >> 33) % 10000
def cmd(a):
    a = pre + [str(v).encode() for v in a]
    out.write(b'*%d\r\n' % len(a) + b''.join(b'$%d\r\n%s\r\n' % (len(v), v) for v in a))
done = 0
while done < n:
    k = min(batch, n - done)
    if batch == 1:
        cmd([1, 'bench:limit:v1:{ACC-%d}' % acc(), 1, 1000, 1000])
    else:
        keys = ['bench:limit:v1:{ACC-%d}' % acc() for _ in range(k)]
        args = ['batch', k]
        for _ in range(k):
            args += [1, 1, 1000, 1000]
        cmd([k] + keys + args)
    done += k
PY
}

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$RPID/stat"; }
HZ=$(getconf CLK_TCK)

# run ENGINE BATCH ROUND: prints us of CPU per decision and usec_per_call
run() {
	local e=$1 b=$2 f="$T/$1-$2.resp" t0 t1 name upc
	[ -e "$f" ] || feed "$e" "$b" 7 >"$f"
	redis-cli -p "$PORT" CONFIG RESETSTAT >/dev/null
	t0=$(cpu_ticks)
	redis-cli -p "$PORT" --pipe <"$f" >"$T/pipe.out" 2>&1
	t1=$(cpu_ticks)
	grep -q "errors: 0," "$T/pipe.out" || echo "bench-module-cpu: $e redis-batch $b: errors" >&2
	name=evalsha; [ "$e" = module ] && name=ratelimit.decide
	upc=$(redis-cli -p "$PORT" INFO commandstats | tr -d '\r' |
		sed -n "s/^cmdstat_$name:.*usec_per_call=\([0-9.]*\).*/\1/p")
	awk -v t=$((t1 - t0)) -v hz="$HZ" -v n="$N" -v u="$upc" 'BEGIN { printf "%.2f %s\n", t * 1e6 / hz / n, u }'
}

declare -A CPU UPC
for r in $(seq "$ROUNDS"); do
	for b in 1 32; do
		for e in script module; do
			read -r c u < <(run "$e" "$b")
			CPU[$e,$b]="${CPU[$e,$b]:-} $c"
			UPC[$e,$b]="${UPC[$e,$b]:-} $u"
		done
	done
done
med() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '%-8s %-12s %26s %22s %14s\n' engine redis-batch "CPU us/decision (rounds)" "usec_per_call (rounds)" "vs the script"
for b in 1 32; do
	for e in script module; do
		m=$(echo "${CPU[$e,$b]}" | med)
		vs=-
		[ "$e" = module ] && vs=$(awk -v a="$m" -v c="$(echo "${CPU[script,$b]}" | med)" 'BEGIN { printf "%.2fx", a / c }')
		printf '%-8s %-12s %26s %22s %14s\n' "$e" "$b" "$m (${CPU[$e,$b]# })" "${UPC[$e,$b]# }" "$vs"
		[ -n "$TSV" ] && printf 'cpu_us_%s_b%s\t%s\n' "$e" "$b" "$m" >>"$TSV"
	done
done
