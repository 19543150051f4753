#!/usr/bin/env bash
# bench-redis-ir.sh - instructions redis-server executes per decision of
# lua/sliding_window.lua and of the module's RATELIMIT.DECIDE (module/),
# batched and not (make bench's section i; also runs alone:
# tools/bench-redis-ir.sh).
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
# The module: the same feed as RATELIMIT.DECIDE calls (same keys, same
# arguments) into a redis-server that loaded module/ratelimit-test.so with
# test-clock, whose time is read from the same hash (one hash read per
# call, as the script's copy; the production build reads the system clock,
# which is cheaper) and whose expiry counts from that clock (no key
# expires under valgrind either).
#
# The algorithms: the log (transfer 20/1s, a sorted set per account) and
# GCRA (20/1s algorithm=gcra burst=20: key transfer:limit:g1:{ACC-n}, one
# string per account), the same accounts and clock; and, asked for with
# BENCH_IR_ALGOS (not by default here; make bench asks for it), pool: the log with a pool
# (pool backend 1000000/1s headroom=100000, all 10,000 accounts in it: its
# log holds a second of decisions, each decision trims what left it); quota:
# the log with a calendar quota beside it (transfer 20/1s 1000000/month: a
# string transfer:limit:c1:{ACC-n}:month per account, never refusing).
#
# Prints a table; with BENCH_IR_TSV=FILE also writes name<TAB>value lines
# (ir_b<n> = the script's instructions per decision, ir_mod_b<n> = the
# module's, ir_mod_ratio_b<n> = module / script; for GCRA the same names
# with "gcra_" after "ir_"). Knobs:
# BENCH_IR_DECISIONS=10000, BENCH_IR_WARM=20000, BENCH_IR_BATCHES="32 3 1",
# BENCH_IR_SCRIPT=lua/sliding_window.lua, BENCH_IR_ENGINES="script module"
# (module only when module/ratelimit-test.so is built: make module),
# BENCH_IR_MODULE=module/ratelimit-test.so, BENCH_IR_ALGOS="log gcra" (or
# with pool, quota).
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
MODULE=${BENCH_IR_MODULE:-$PWD/module/ratelimit-test.so}
ENGINES=${BENCH_IR_ENGINES:-script module}
ALGOS=${BENCH_IR_ALGOS:-log gcra}
if [ ! -e "$MODULE" ] && [ -z "${BENCH_IR_ENGINES:-}" ]; then
	echo "bench-redis-ir: $MODULE not built (make module): the script only" >&2
	ENGINES=script
fi

# The measured copy: TIME from the feed's clock, TTLs x 1000 (the log's
# PEXPIRE, GCRA's SET ... PX).
sed -e "s/local t = redis.call('TIME')/local t = redis.call('HMGET', 'test:clock', 's', 'us')/" \
	-e "s/'PEXPIRE', \([^,]*\), ttl)/'PEXPIRE', \1, ttl .. '000')/" \
	-e "s/'PX', ttl)/'PX', ttl .. '000')/" "$SCRIPT" >"$T/script.lua"
if ! grep -q "test:clock" "$T/script.lua" || ! grep -q "'PEXPIRE', .*ttl .. '000'" "$T/script.lua"; then
	echo "bench-redis-ir: $SCRIPT no longer has the TIME or PEXPIRE line this edits" >&2
	exit 1
fi
if [[ " $ALGOS " == *" gcra "* ]] && ! grep -q "'PX', ttl .. '000'" "$T/script.lua"; then
	echo "bench-redis-ir: $SCRIPT has no GCRA SET ... PX line to edit (BENCH_IR_ALGOS=log)" >&2
	exit 1
fi

# A script from before 1.0 (commit c4a00a6) takes a request id after the
# cost (its header says so): the feed then sends one, for comparisons with
# older scripts (BENCH_IR_SCRIPT). Never to the module.
REQID=0
grep -q '^-- ARGV\[2\] *\(request id\|member prefix\)' "$SCRIPT" && REQID=1

# feed SHA BATCH COUNT START_US SEED ALGO: RESP for COUNT decisions, clock
# first (SHA "module": RATELIMIT.DECIDE instead of EVALSHA; ALGO l: the
# log, g: GCRA, p: the log with a pool, q: the log with a monthly quota).
feed() {
	python3 - "$@" "$REQID" <<'EOF'
import sys
sha, batch, count, t, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
gcra = sys.argv[6] == 'g'
pool = sys.argv[6] == 'p'
quota = sys.argv[6] == 'q'
def qk(a):
    return ['transfer:limit:c1:{ACC-%d}:month' % a] if quota else []
QA = [1000000, 'cal:m:0:1'] if quota else []
POOL = ['backend:pool:p1:{backend}', 'backend:pool:a1:{backend}'] if pool else []
reqid = sys.argv[7] == '1' and sha != 'module'
ACCOUNTS, LIMIT, WINDOW_MS, RATE, CLOCK_EVERY = 10000, '20', '1000', 20000, 32
KEY = 'transfer:limit:g1:{ACC-%d}' if gcra else 'transfer:limit:v1:{ACC-%d}'
if gcra:
    WINDOW_MS = 'gcra:1000:20'
    reqid = False
out = sys.stdout.buffer
def cmd(*a):
    if a[0] == 'EVALSHA' and sha == 'module':
        a = ('RATELIMIT.DECIDE',) + a[2:]
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
        cmd('HSET', 'test:clock', 's', t // 1000000, 'us', t % 1000000)
    n = min(batch, count - done)
    if batch == 1:
        a = account()
        pp = [1000000, 'pool:1000:100000:ACC-%d' % a] if pool else []
        cmd('EVALSHA', sha, 1 + len(qk(a)) + len(POOL), KEY % a, *qk(a), *POOL, 1,
            *(['ir-%d' % done] if reqid else []), LIMIT, WINDOW_MS, *QA, *pp)
    else:
        accs = [account() for _ in range(n)]
        keys = [k for a in accs for k in [KEY % a] + qk(a) + POOL]
        args = ['batch', n]
        for i in range(n):
            pp = [1000000, 'pool:1000:100000:ACC-%d' % accs[i]] if pool else []
            args += [1 + len(qk(accs[i])) + len(POOL), 1, *(['ir-%d' % (done + i)] if reqid else []),
                     LIMIT, WINDOW_MS, *QA, *pp]
        cmd('EVALSHA', sha, len(keys), *keys, *args)
    done += n
    t += n * 1000000 // RATE
EOF
}

# start MODE: redis-server for that mode (s<algo><batch>: the script,
# m<algo><batch>: the module; algo l: the log, g: GCRA) under callgrind
# (PORT[mode], VPID[mode]), started here so that the exit trap knows its
# PID.
declare -A PORT VPID
start() {
	local b=$1 d="$T/b$1" load=()
	mkdir -p "$d"
	PORT[$b]=$(free_port)
	[ "${b:0:1}" = m ] && load=(--loadmodule "$MODULE" test-clock)
	valgrind --tool=callgrind --callgrind-out-file="$d/cg.%p" --dump-instr=no \
		redis-server --port "${PORT[$b]}" --bind 127.0.0.1 --save '' --appendonly no --dir "$d" \
		"${load[@]}" >"$d/valgrind.log" 2>&1 &
	VPID[$b]=$!
	t_track "${VPID[$b]}"
}

# measure MODE: prints instructions per decision (nothing on failure)
measure() {
	local m=$1 a=${1:1:1} b=${1:2} d="$T/b$1" port=${PORT[$1]} vpid=${VPID[$1]} sha=module f ir
	for _ in $(seq 150); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.2; done
	[ "${m:0:1}" = s ] && sha=$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$T/script.lua")")
	feed "$sha" "$b" "$WARM" 1800000000000000 1 "$a" >"$d/warm.resp"
	feed "$sha" "$b" "$N" $((1800000000000000 + WARM * 50)) 2 "$a" >"$d/run.resp"
	redis-cli -p "$port" --pipe <"$d/warm.resp" >"$d/warm.out" 2>&1
	callgrind_control -z "$vpid" >/dev/null 2>&1
	redis-cli -p "$port" --pipe <"$d/run.resp" >"$d/run.out" 2>&1
	callgrind_control -d "$vpid" >/dev/null 2>&1
	# every decision must have been answered without an error
	if ! grep -q "errors: 0," "$d/run.out" || [ "$(redis-cli -p "$port" INFO errorstats | grep -c errorstat_)" != 0 ]; then
		echo "bench-redis-ir: $m (redis-batch $b): errors in the answers" >&2
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
MODES=()
for a in $ALGOS; do for e in $ENGINES; do for b in $BATCHES; do
	MODES+=("${e:0:1}${a:0:1}$b")
done; done; done
set -- "${MODES[@]}"
while [ $# -gt 0 ]; do
	# two at a time: valgrind is single-threaded and the box has two cores
	start "$1"
	measure "$1" >"$T/ir.$1" &
	p1=$!
	if [ $# -gt 1 ]; then start "$2"; measure "$2" >"$T/ir.$2" & p2=$!; wait "$p2"; shift; fi
	wait "$p1"
	shift
done
printf '%-6s %-8s %-12s %24s %12s %14s %10s\n' algo engine redis-batch "instructions/decision" \
	"vs 1" "vs the script" "vs the log"
for m in "${MODES[@]}"; do
	IR[$m]=$(cat "$T/ir.$m")
	e=script; [ "${m:0:1}" = m ] && e=module
	a=log; [ "${m:1:1}" = g ] && a=gcra
	b=${m:2}
	[ -n "${IR[$m]}" ] || { echo "bench-redis-ir: $a $e redis-batch $b: no count" >&2; continue; }
	one=$(cat "$T/ir.${m:0:2}1" 2>/dev/null)
	r=-; [ -n "$one" ] && r=$(awk -v a="${IR[$m]}" -v c="$one" 'BEGIN { printf "%.2fx", a / c }')
	vs=-
	if [ "$e" = module ] && [ -n "$(cat "$T/ir.s${m:1}" 2>/dev/null)" ]; then
		vs=$(awk -v a="${IR[$m]}" -v c="$(cat "$T/ir.s${m:1}")" 'BEGIN { printf "%.2fx", a / c }')
	fi
	vl=-
	[ "${m:1:1}" = p ] && a=pool
	[ "${m:1:1}" = q ] && a=quota
	if [ "$a" != log ] && [ -n "$(cat "$T/ir.${m:0:1}l$b" 2>/dev/null)" ]; then
		vl=$(awk -v a="${IR[$m]}" -v c="$(cat "$T/ir.${m:0:1}l$b")" 'BEGIN { printf "%.2fx", a / c }')
	fi
	printf '%-6s %-8s %-12s %24s %12s %14s %10s\n' "$a" "$e" "$b" "${IR[$m]}" "$r" "$vs" "$vl"
	if [ -n "$TSV" ]; then
		g=; [ "$a" != log ] && g=${a}_
		if [ "$e" = script ]; then
			printf 'ir_%sb%s\t%s\n' "$g" "$b" "${IR[$m]}" >>"$TSV"
		else
			printf 'ir_%smod_b%s\t%s\n' "$g" "$b" "${IR[$m]}" >>"$TSV"
			[ "$vs" != - ] && printf 'ir_%smod_ratio_b%s\t%s\n' "$g" "$b" "${vs%x}" >>"$TSV"
		fi
	fi
done
[ -n "$(cat "$T/ir.${MODES[0]:0:2}1" 2>/dev/null)" ] || [ -n "$(cat "$T/ir.${MODES[0]}" 2>/dev/null)" ]
