#!/usr/bin/env bash
# bench-redis-ir.sh - instructions redis-server executes per decision of
# lua/sliding_window.lua, batched and not (make bench's section i; also runs
# alone: tools/bench-redis-ir.sh).
#
# Why instructions: CPU time on a shared 2-core box drifts by a third from
# one minute to the next, so two runs of (f) a few minutes apart cannot show
# a 10% change in the script. Instructions counted by callgrind do not drift:
# the same commands give the same count, to a fraction of a percent.
#
# What runs: redis-server under callgrind, fed by redis-cli --pipe with
# decisions on 10,000 accounts at 20/1s (the bench policy), all allowed,
# 20,000 decisions of warm-up then N measured (counters zeroed between).
# The script is the real one with TIME read from a hash the feed sets (so
# that windows slide by the feed's clock, 20,000 decisions per second, not
# by valgrind's slow one) and its TTLs made 1000 times longer (so that real
# time passing under valgrind expires nothing); both edits are one line
# and cost the same in every mode. The clock is set once per 32 decisions
# in every mode. Modes: redis-batch 32, redis-batch 3 (about what 16 in
# flight gives the agent), and 1 (one EVALSHA per decision, what
# cluster:// and redis-batch 1 send).
#
# Prints a table; with BENCH_IR_TSV=FILE also writes name<TAB>value lines
# (ir_b<n> = instructions per decision). Knobs: BENCH_IR_DECISIONS=10000, BENCH_IR_WARM=20000,
# BENCH_IR_BATCHES="32 3 1", BENCH_IR_SCRIPT=lua/sliding_window.lua.
# About 30 s per mode (two modes run at a time).
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=../tests/lib.sh
. tests/lib.sh
t_setup
for t in valgrind callgrind_control callgrind_annotate redis-server redis-cli python3; do
	command -v "$t" >/dev/null || { echo "bench-redis-ir: $t not found (make deps)" >&2; exit 1; }
done
N=${BENCH_IR_DECISIONS:-10000}
WARM=${BENCH_IR_WARM:-20000}
BATCHES=${BENCH_IR_BATCHES:-32 3 1}
SCRIPT=${BENCH_IR_SCRIPT:-lua/sliding_window.lua}
TSV=${BENCH_IR_TSV:-}

# The measured copy: TIME from the feed's clock, TTLs x 1000.
sed -e "s/local t = redis.call('TIME')/local t = redis.call('HMGET', 'ir:clock', 's', 'us')/" \
	-e "s/'PEXPIRE', \([^,]*\), ttl)/'PEXPIRE', \1, ttl .. '000')/" "$SCRIPT" >"$T/script.lua"
if ! grep -q "ir:clock" "$T/script.lua" || ! grep -q "ttl .. '000'" "$T/script.lua"; then
	echo "bench-redis-ir: $SCRIPT no longer has the TIME or PEXPIRE line this edits" >&2
	exit 1
fi

# A script from before 1.0 (commit c4a00a6) takes a request id after the
# cost (its header says so): the feed then sends one, for comparisons with
# older scripts (BENCH_IR_SCRIPT).
REQID=0
grep -q '^-- ARGV\[2\] *\(request id\|member prefix\)' "$SCRIPT" && REQID=1

# feed SHA BATCH COUNT START_US SEED: RESP for COUNT decisions, clock first.
feed() {
	python3 - "$@" "$REQID" <<'EOF'
import sys
sha, batch, count, t, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
reqid = sys.argv[6] == '1'
ACCOUNTS, LIMIT, WINDOW_MS, RATE, CLOCK_EVERY = 10000, '20', '1000', 20000, 32
out = sys.stdout.buffer
def cmd(*a):
    a = [str(x).encode() for x in a]
    out.write(b'*%d\r\n' % len(a) + b''.join(b'$%d\r\n%s\r\n' % (len(x), x) for x in a))
x = seed
def account():
    global x
    x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    return (x >> 33) % ACCOUNTS
done = 0
while done < count:
    if done % CLOCK_EVERY == 0:
        cmd('HSET', 'ir:clock', 's', t // 1000000, 'us', t % 1000000)
    n = min(batch, count - done)
    if batch == 1:
        cmd('EVALSHA', sha, 1, 'transfer:limit:v1:{ACC-%d}' % account(), 1, *(['ir-%d' % done] if reqid else []), LIMIT, WINDOW_MS)
    else:
        keys = ['transfer:limit:v1:{ACC-%d}' % account() for _ in range(n)]
        args = ['batch', n]
        for i in range(n):
            args += [1, 1, *(['ir-%d' % (done + i)] if reqid else []), LIMIT, WINDOW_MS]
        cmd('EVALSHA', sha, n, *keys, *args)
    done += n
    t += n * 1000000 // RATE
EOF
}

# start BATCH: redis-server for that mode under callgrind (PORT[b], VPID[b]),
# started here so that the exit trap knows its PID.
declare -A PORT VPID
start() {
	local b=$1 d="$T/b$1"
	mkdir -p "$d"
	PORT[$b]=$(free_port)
	valgrind --tool=callgrind --callgrind-out-file="$d/cg.%p" --dump-instr=no \
		redis-server --port "${PORT[$b]}" --bind 127.0.0.1 --save '' --appendonly no --dir "$d" \
		>"$d/valgrind.log" 2>&1 &
	VPID[$b]=$!
	t_track "${VPID[$b]}"
}

# measure BATCH: prints instructions per decision (nothing on failure)
measure() {
	local b=$1 d="$T/b$1" port=${PORT[$1]} vpid=${VPID[$1]} sha f ir
	for _ in $(seq 150); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.2; done
	sha=$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$T/script.lua")")
	feed "$sha" "$b" "$WARM" 1800000000000000 1 >"$d/warm.resp"
	feed "$sha" "$b" "$N" $((1800000000000000 + WARM * 50)) 2 >"$d/run.resp"
	redis-cli -p "$port" --pipe <"$d/warm.resp" >"$d/warm.out" 2>&1
	callgrind_control -z "$vpid" >/dev/null 2>&1
	redis-cli -p "$port" --pipe <"$d/run.resp" >"$d/run.out" 2>&1
	callgrind_control -d "$vpid" >/dev/null 2>&1
	# every decision must have been answered without an error
	if ! grep -q "errors: 0," "$d/run.out" || [ "$(redis-cli -p "$port" INFO errorstats | grep -c errorstat_)" != 0 ]; then
		echo "bench-redis-ir: redis-batch $b: the script answered with errors" >&2
		return 0
	fi
	redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1
	for _ in $(seq 100); do kill -0 "$vpid" 2>/dev/null || break; sleep 0.2; done
	# the dump callgrind_control -d asked for (the one at exit is cg.<pid>)
	f=$(find "$d" -name 'cg.*.1' | head -n 1)
	[ -n "$f" ] || return 0
	ir=$(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }')
	[ -n "$ir" ] && echo $((ir / N))
}

declare -A IR
set -- $BATCHES
while [ $# -gt 0 ]; do
	# two at a time: valgrind is single-threaded and the box has two cores
	start "$1"
	measure "$1" >"$T/ir.$1" &
	p1=$!
	if [ $# -gt 1 ]; then start "$2"; measure "$2" >"$T/ir.$2" & p2=$!; wait "$p2"; shift; fi
	wait "$p1"
	shift
done
printf '%-12s %24s %12s\n' redis-batch "instructions/decision" "vs 1"
for b in $BATCHES; do
	IR[$b]=$(cat "$T/ir.$b")
	[ -n "${IR[$b]}" ] || { echo "bench-redis-ir: redis-batch $b: no count" >&2; continue; }
	r=-
	[ -n "${IR[1]:-}" ] || IR[1]=$(cat "$T/ir.1" 2>/dev/null)
	[ -n "${IR[1]:-}" ] && r=$(awk -v a="${IR[$b]}" -v c="${IR[1]}" 'BEGIN { printf "%.2fx", a / c }')
	printf '%-12s %24s %12s\n' "$b" "${IR[$b]}" "$r"
	[ -n "$TSV" ] && printf 'ir_b%s\t%s\n' "$b" "${IR[$b]}" >>"$TSV"
done
[ -n "${IR[1]:-}" ]
