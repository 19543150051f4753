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
# With BENCH_CPU_POOL=1 (the default) the same again with every decision
# in one pool (pool bench-pool 1000000/1s headroom=100000: the pool's
# arguments and two keys after the account's window, as the agent sends a
# pooled policy). A pool's keys are in one slot, so one Redis core decides
# all of its decisions: 1,000,000 / (its CPU us per decision) is the
# decisions per second one pool can take.
#
# Prints a table; with BENCH_CPU_TSV=FILE also writes name<TAB>value lines
# (cpu_us_<engine>_b<n>, the median over the rounds; pooled:
# cpu_us_pool_<engine>_b<n> and pool_dps_<engine>_b<n>).
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
POOL=${BENCH_CPU_POOL:-1}
[ -e "$MODULE" ] || { echo "bench-module-cpu: $MODULE not built (make module)" >&2; exit 1; }

PORT=$(free_port)
"$SERVER" --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
	--loadmodule "$MODULE" >"$T/redis.log" 2>&1 &
RPID=$!
t_track "$RPID"
for _ in $(seq 100); do redis-cli -p "$PORT" PING >/dev/null 2>&1 && break; sleep 0.1; done
SHA=$(redis-cli -p "$PORT" SCRIPT LOAD "$(cat lua/sliding_window.lua)")

# feed ENGINE BATCH SEED POOLED: RESP for N decisions (POOLED: 1, in a pool)
feed() {
	python3 - "$SHA" "$@" "$N" <<'PY'
import sys
sha, engine, batch, seed, pooled, n = (sys.argv[1], sys.argv[2], int(sys.argv[3]),
                                       int(sys.argv[4]), sys.argv[5] == '1', int(sys.argv[6]))
PK = ['bench-pool:pool:p1:{bench-pool}', 'bench-pool:pool:a1:{bench-pool}'] if pooled else []
def pp(a):
    return [1000000, 'pool:1000:100000:ACC-%d' % a] if pooled else []
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
        a = acc()
        cmd([1 + len(PK), 'bench:limit:v1:{ACC-%d}' % a] + PK + [1, 1000, 1000] + pp(a))
    else:
        accs = [acc() for _ in range(k)]
        keys, args = [], ['batch', k]
        for a in accs:
            keys += ['bench:limit:v1:{ACC-%d}' % a] + PK
            args += [1 + len(PK), 1, 1000, 1000] + pp(a)
        cmd([len(keys)] + keys + args)
    done += k
PY
}

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$RPID/stat"; }
HZ=$(getconf CLK_TCK)

# run ENGINE BATCH [POOLED]: prints us of CPU per decision and usec_per_call
run() {
	local e=$1 b=$2 p=${3:-0} f="$T/$1-$2-${3:-0}.resp" t0 t1 name upc
	[ -e "$f" ] || feed "$e" "$b" 7 "$p" >"$f"
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
KINDS=0; [ "$POOL" = 1 ] && KINDS="0 1"
for r in $(seq "$ROUNDS"); do
	for p in $KINDS; do
		for b in 1 32; do
			for e in script module; do
				read -r c u < <(run "$e" "$b" "$p")
				CPU[$e,$b,$p]="${CPU[$e,$b,$p]:-} $c"
				UPC[$e,$b,$p]="${UPC[$e,$b,$p]:-} $u"
			done
		done
	done
done
med() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '%-8s %-8s %-12s %26s %22s %14s %14s\n' pool engine redis-batch "CPU us/decision (rounds)" \
	"usec_per_call (rounds)" "vs the script" "decisions/s"
for p in $KINDS; do
	for b in 1 32; do
		for e in script module; do
			m=$(echo "${CPU[$e,$b,$p]}" | med)
			vs=-
			[ "$e" = module ] && vs=$(awk -v a="$m" -v c="$(echo "${CPU[script,$b,$p]}" | med)" 'BEGIN { printf "%.2fx", a / c }')
			dps=$(awk -v a="$m" 'BEGIN { if (a > 0) printf "%d", 1e6 / a; else print "-" }')
			pn=no; [ "$p" = 1 ] && pn=yes
			printf '%-8s %-8s %-12s %26s %22s %14s %14s\n' "$pn" "$e" "$b" "$m (${CPU[$e,$b,$p]# })" \
				"${UPC[$e,$b,$p]# }" "$vs" "$dps"
			[ -n "$TSV" ] || continue
			if [ "$p" = 1 ]; then
				printf 'cpu_us_pool_%s_b%s\t%s\npool_dps_%s_b%s\t%s\n' "$e" "$b" "$m" "$e" "$b" "$dps" >>"$TSV"
			else
				printf 'cpu_us_%s_b%s\t%s\n' "$e" "$b" "$m" >>"$TSV"
			fi
		done
	done
done
