#!/usr/bin/env bash
# bench.sh - `make bench`: what the rate limiter costs, measured in one run on
# loopback and given as ratios (absolute numbers drift between machines;
# ratios within one run hold).
#
#   (a) Redis ceiling     redis-benchmark EVALSHA of lua/sliding_window.lua,
#                         pipeline 1 and 16
#   (b) agent path        spoa-bench -> ratelimit-spoa -> Redis, at the same
#                         number of requests in flight as (a)
#   (c) end to end        wrk -> HAProxy alone (same JWT check, no SPOE) vs
#                         wrk -> HAProxy + agent + Redis (haproxy/haproxy.cfg),
#                         runs: uniform, mixed (20% on 5 abusers), abuse (100%);
#                         and uniform without JWT: HAProxy alone, the SPOE floor
#                         (the same edge and SPOE rules talking to
#                         bench/spoa-floor, which answers every NOTIFY with
#                         fixed variables and does no I/O), the script engine
#                         and the module's (module/ratelimit.so, loaded into
#                         the bench's Redis when it exists: make bench builds
#                         it), back to back in each round, at the reported
#                         load shape and at a second one
#                         and the self-answering shape (tools/edge-self.sh):
#                         the same no-JWT edges answering 201 themselves
#                         instead of proxying to a backend HAProxy: alone,
#                         floor, script, module, and the module with unix
#                         sockets on both legs (agent listen unix:, HAProxy
#                         server unix@, redis unix://), back to back in each
#                         round, with the machine's softirq CPU per request
#   (d) memory            agent RSS with 1,000 idle SPOP connections, and
#                         malloc calls per decision (an LD_PRELOAD counter)
#   (e) profile           where the agent's cycles go (perf, when it works)
#   (m) Redis memory      MEMORY USAGE per busy account and usec_per_call, sliding
#                         log vs precision= buckets (tools/bench-memory.sh)
#   (f) Redis per decision redis-server CPU and INFO commandstats per decision,
#                         redis-batch (default) vs 1, at 16 and 128 in flight
#   (h) lean answer       HAProxy's instructions per request (callgrind), the
#                         full answer against RL_IETF_ONLY's lean one
#                         (tools/bench-haproxy-ir.sh module module+ietf module+nodone
#                         lease: also what the response-phase ratelimit-done line
#                         costs a policy without inflight=, and what sending the
#                         message costs HAProxy under one with), and the agent's side of
#                         ratelimit-done: instructions and syscalls per request
#                         of an inflight= policy with and without the message
#                         (tools/bench-agent-ir.sh module module+inflight
#                         module+done; BENCH_AIR_SHAPES=4x16)
#   (u) the legs          agent, redis-server, client and softirq CPU per
#                         decision over a fixed count, TCP against unix
#                         sockets on each leg (tools/bench-legs.sh)
#   (i) Redis instructions instructions redis-server runs per decision
#                         (callgrind: does not drift with the box's load),
#                         redis-batch 32, 3 and 1 (tools/bench-redis-ir.sh)
#
# It prints one table and writes docs/benchmarks.md and docs/bench.svg (the
# report is tools/bench-report.py; the malloc counter of (d) is bench/mcount.c,
# built by make bench).
# Every process it starts runs on an ephemeral 127.0.0.1 port and is stopped
# by PID at exit. Whole run: about 10 minutes (the first one also mints
# 10,000 tokens, ~15 s).
#
# Knobs (environment):
#   BENCH_SECS=5              seconds per measured run
#   BENCH_ROUNDS=3            rounds of (a)-(c); each figure is the median round
#   BENCH_WRK_THREADS=2       wrk threads
#   BENCH_WRK_CONNS=128       wrk connections
#   BENCH_SHAPE2=1x64         (c) no JWT: the second load shape, THREADSxCONNS
#                             ('' = the reported shape only)
#   BENCH_FLOOR_ARGS=        spoa-floor's options, e.g. -s (set status only)
#   BENCH_SELF=1              (c): 0 skips the self-answering rows
#   BENCH_JWT=1               (c): 0 skips the JWT rows and the deny-cache-off
#                             rows (the no-JWT floor comparison only)
#   BENCH_ACCOUNTS=10000      accounts (= tokens) in uniform runs
#   BENCH_OUT=docs/benchmarks.md   report file ('' = print only)
#   BENCH_PLOT=docs/bench.svg      plot file ('' = none)
#   BENCH_PERF=1              profile the agent with perf (0 = skip)
#   BENCH_CACHE=build/bench-cache  JWT key pair and tokens, reused while valid
#   BENCH_BATCH=32            (f): the batched side's redis-batch
#   BENCH_AIR_SHAPES=4x16     (h): spoa-bench's connections x depth for the
#                             agent's count of ratelimit-done
#   BENCH_SECTIONS="a b c d e m f i u h" the parts to run (the report shows '-' for
#                                  the others)
#   BENCH_RENDER=FILE         only redo the report from a results file (each run
#                             saves its own as $BENCH_CACHE/results-last.tsv)
#   MCOUNT=build/rel/bench/mcount.so   the malloc counter (make bench sets it)
#   HAPROXY=haproxy           the HAProxy binary of (c), e.g. build/haproxy-3.2/haproxy
#                             (make haproxy32); its CPU per request is reported
#   T_KEEP=1                  keep the temp dir with every log
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=../tests/lib.sh
. tests/lib.sh

SECS=${BENCH_SECS:-5}
WRK_THREADS=${BENCH_WRK_THREADS:-2}
WRK_CONNS=${BENCH_WRK_CONNS:-128}
SHAPE2=${BENCH_SHAPE2-1x64}
JWT=${BENCH_JWT:-1}
SELF=${BENCH_SELF:-1}
FLOOR=${FLOOR:-$(dirname "$BENCH")/spoa-floor}
ACCOUNTS=${BENCH_ACCOUNTS:-10000}
OUT=${BENCH_OUT-docs/benchmarks.md}
PLOT=${BENCH_PLOT-docs/bench.svg}
PERF=${BENCH_PERF:-1}
SECTIONS=" ${BENCH_SECTIONS:-a b c d e m f i u h} "
ROUNDS=${BENCH_ROUNDS:-3}
CACHE=${BENCH_CACHE:-$ROOT/build/bench-cache}
MCOUNT=${MCOUNT:-$ROOT/build/rel/bench/mcount.so}
HOT_N=5
MIXED_PCT=20
# The bench policy: 20/1s per account. Uniform traffic over 10,000 accounts
# (about 1 request per account per second end to end, 5 in (b)) stays far
# below it: all allowed; the 5 hot accounts get hundreds per second each,
# ten times the limit and more.
POLICY_LIMIT=20
POLICY_WINDOW_MS=1000
# (a)/(b) concurrency: requests in flight = connections x pipeline depth
C_P1=16
C_P16=8
# (f) the batched side: the agent's default redis-batch
BATCH_ON=${BENCH_BATCH:-32}

declare -A R          # results: R[name]=value
ERRORS=()             # runs that did not come out clean

say() { printf '%s\n' "$*" >&2; }
want() { [[ $SECTIONS == *" $1 "* ]]; }
die() { say "bench: $*"; exit 1; }
note_error() { ERRORS+=("$*"); say "  ! $*"; }

# ---------------------------------------------------------------------------
# Step 0: tools and binaries
# ---------------------------------------------------------------------------
for b in "$AGENT" "$BENCH" "$FLOOR"; do
	[ -x "$b" ] || die "$b is missing: run make first"
done
for t in redis-server redis-cli redis-benchmark "$HAPROXY" wrk python3 curl; do
	command -v "$t" >/dev/null || die "$t is not installed (make deps)"
done
python3 -c 'import cryptography' 2>/dev/null || tools/deps.sh tests python3-cryptography \
	|| die "python3-cryptography is needed to mint 10,000 tokens"

t_setup
say "bench: temp dir $T, $(nproc) CPU(s), ${SECS}s per run"

# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

# rss_kb PID: resident set in kB (VmRSS).
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
hwm_kb() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }

# json_get FILE KEY...: a value out of spoa-bench --json (dotted keys).
json_get() {
	python3 - "$@" <<-'PY'
	import json, sys
	d = json.load(open(sys.argv[1]))
	for k in sys.argv[2:]:
	    v = d
	    for part in k.split('.'):
	        v = v[part]
	    print(v)
	PY
}

# wait_sock PATH: until something accepts on the unix socket PATH.
wait_sock() {
	local i
	for i in $(seq 200); do
		python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])' "$1" 2>/dev/null && return 0
		sleep 0.05
	done
	return 1
}

# start_bench_agent NAME EXTRA-CONFIG [env...]: an agent with the bench
# policies on a fresh port (or $WANT_PORT); sets AGENT_PORT, AGENT_PID,
# METRICS_PORT. LISTEN / REDIS_URL: other addresses (unix:/path,
# unix:///path) than TCP on loopback. Its redis-engine is $ENGINE (default script: the bench's
# Redis may have the module, and every section but the module row of (c)
# measures the script, as it always has).
start_bench_agent() {
	local name=$1 extra=$2; shift 2
	AGENT_PORT=${WANT_PORT:-$(free_port)}
	METRICS_PORT=$(free_port)
	cat > "$T/agent-$name.conf" <<-CONF
	listen        ${LISTEN:-127.0.0.1:$AGENT_PORT}
	redis         ${REDIS_URL:-redis://127.0.0.1:$REDIS_PORT/0}
	# generous: on a loaded 2-core box a 50ms budget turns scheduling delay
	# into errors, and we measure throughput, not the timeout path
	redis-timeout 500ms
	threads       1
	log-level     warn
	metrics       127.0.0.1:$METRICS_PORT
	max-connections 4000
	policy transfer $POLICY_LIMIT/${POLICY_WINDOW_MS}ms
	policy reads    100/1m on-redis-error=allow
	redis-engine    ${ENGINE:-script}
	$LEGACY_OFF
	$extra
	CONF
	"$AGENT" -c -f "$T/agent-$name.conf" >"$T/agent-$name.check" 2>&1 \
		|| { cat "$T/agent-$name.check" >&2; die "agent config $name refused"; }
	env "$@" "$AGENT" -f "$T/agent-$name.conf" >>"$T/agent-$name.log" 2>&1 &
	AGENT_PID=$!
	t_track "$AGENT_PID"
	if [ -n "${LISTEN:-}" ]; then
		wait_sock "${LISTEN#unix:}" || { tail "$T/agent-$name.log" >&2; die "agent $name did not start"; }
	else
		wait_port "$AGENT_PORT" 10 || { tail "$T/agent-$name.log" >&2; die "agent $name did not start"; }
	fi
	wait_port "$METRICS_PORT" 10 || true
}

stop_bench_agent() {
	kill -TERM "$AGENT_PID" 2>/dev/null
	wait_gone "$AGENT_PID" 10 || kill -KILL "$AGENT_PID" 2>/dev/null
}

# metric NAME: sum of a Prometheus series of the agent (all label sets),
# e.g. metric local_cache_answers_total.
metric() {
	curl -s --max-time 2 "http://127.0.0.1:$METRICS_PORT/metrics" 2>/dev/null |
		awk -v n="ratelimit_spoa_$1" '$1 == n || substr($1, 1, length(n) + 1) == n"{" { s += $2 }
			END { printf "%d\n", s }'
}

# run_spoa_bench NAME ARGS...: spoa-bench against the current agent for
# $SECS; keeps its JSON in $T/sb-NAME.json and fills R[sb_NAME_*].
run_spoa_bench() {
	local name=$1; shift
	local f=$T/sb-$name.json rc
	timeout $((SECS + 60)) "$BENCH" -a "127.0.0.1:$AGENT_PORT" -t "${SECS}s" -k "$ACCOUNTS" \
		-p transfer --json "$@" >"$f" 2>"$T/sb-$name.err"
	rc=$?
	[ $rc -eq 0 ] || note_error "spoa-bench $name exited $rc: $(tail -n1 "$T/sb-$name.err")"
	[ -s "$f" ] || { echo '{}' >"$f"; return 1; }
	read -r "R[sb_${name}_rps]" "R[sb_${name}_p50]" "R[sb_${name}_p99]" "R[sb_${name}_p999]" \
		"R[sb_${name}_allow]" "R[sb_${name}_deny]" "R[sb_${name}_error]" < <(json_get "$f" msgs_per_s \
		latency_us.p50 latency_us.p99 latency_us.p999 allow deny error | tr '\n' ' ')
	say "  spoa-bench $name: ${R[sb_${name}_rps]} msgs/s p50 ${R[sb_${name}_p50]} us p99 ${R[sb_${name}_p99]} us (allow ${R[sb_${name}_allow]} deny ${R[sb_${name}_deny]} error ${R[sb_${name}_error]})"
}

# redis_ceiling NAME CONNS PIPELINE: redis-benchmark EVALSHA of the project's
# script with the agent's key and argv shapes, uniform over $ACCOUNTS keys,
# sized to run about $SECS seconds. Fills R[rb_NAME_*].
declare -A RB_N       # redis-benchmark -n per shape, from one calibration
redis_ceiling() {
	local name=$1 c=$2 p=$3 n rps line
	local args=(EVALSHA "$SHA" 1 "transfer:limit:v1:ACC-__rand_int__" 1
	            "$POLICY_LIMIT" "$POLICY_WINDOW_MS")
	# redis-benchmark has no duration: size -n from a short calibration
	if [ -z "${RB_N[$c-$p]:-}" ]; then
		line=$(redis-benchmark -p "$REDIS_PORT" -c "$c" -P "$p" -n 20000 -r "$ACCOUNTS" --csv "${args[@]}" | tail -n1)
		rps=$(echo "$line" | awk -F'"' '{ printf "%d", $4 }')
		n=$(( rps * SECS ))
		[ "$n" -ge 20000 ] || n=20000
		RB_N[$c-$p]=$n
	fi
	n=${RB_N[$c-$p]}
	line=$(timeout $((SECS * 4 + 30)) redis-benchmark -p "$REDIS_PORT" -c "$c" -P "$p" -n "$n" \
		-r "$ACCOUNTS" --csv "${args[@]}" | tail -n1)
	# "test","rps","avg","min","p50","p95","p99","max" (ms)
	R[rb_${name}_rps]=$(echo "$line" | awk -F'"' '{ printf "%.1f", $4 }')
	R[rb_${name}_p50]=$(echo "$line" | awk -F'"' '{ printf "%.1f", $10 * 1000 }')
	R[rb_${name}_p99]=$(echo "$line" | awk -F'"' '{ printf "%.1f", $14 * 1000 }')
	say "  redis-benchmark $name (-c $c -P $p, $n calls): ${R[rb_${name}_rps]} calls/s p50 ${R[rb_${name}_p50]} us p99 ${R[rb_${name}_p99]} us"
}

# to_us VALUE-WITH-UNIT: wrk's "812.00us" / "2.31ms" / "1.02s" in microseconds.
to_us() {
	awk -v v="$1" 'BEGIN {
		n = v + 0
		if (v ~ /us$/) m = 1; else if (v ~ /ms$/) m = 1000; else if (v ~ /m$/) m = 60e6; else if (v ~ /s$/) m = 1e6; else m = 1
		printf "%.1f", n * m }'
}

# run_wrk NAME PORT HOT_N HOT_PCT [IDS MODE]: wrk for $SECS against an edge;
# fills R[wrk_NAME_*] (req/s, p50/p99 us, status counts). IDS/MODE: the
# identities file and "header" for the no-JWT edge (default: the tokens).
run_wrk() {
	local name=$1 port=$2 hot=$3 pct=$4 ids=${5:-$TOKENS} mode=${6:-} f=$T/wrk-$1.out cpu0 sirq0
	cpu0=$(proc_ticks "${EDGE_PIDS[$port]:-}")
	sirq0=$(softirq_ticks)
	timeout $((SECS + 30)) wrk -t "$WRK_THREADS" -c "$WRK_CONNS" -d "${SECS}s" --latency \
		-s tools/bench-wrk.lua "http://127.0.0.1:$port/transfers" -- "$ids" "$hot" "$pct" $mode >"$f" 2>&1 \
		|| note_error "wrk $name failed: $(tail -n1 "$f")"
	R[wrk_${name}_rps]=$(awk '/^Requests\/sec:/ { printf "%.1f", $2 }' "$f")
	# HAProxy's own CPU (user + system) per request served, in µs
	R[wrk_${name}_cpu_us]=$(awk -v t=$(( $(proc_ticks "${EDGE_PIDS[$port]:-}") - cpu0 )) \
		-v hz="$(getconf CLK_TCK)" '/ requests in / { if ($1 > 0) printf "%.1f", t * 1e6 / hz / $1 }' "$f")
	# the whole machine's softirq time per request (mostly loopback TCP)
	R[wrk_${name}_sirq_us]=$(awk -v t=$(( $(softirq_ticks) - sirq0 )) \
		-v hz="$(getconf CLK_TCK)" '/ requests in / { if ($1 > 0) printf "%.1f", t * 1e6 / hz / $1 }' "$f")
	R[wrk_${name}_p50]=$(to_us "$(awk '$1 == "50%" { print $2 }' "$f")")
	R[wrk_${name}_p99]=$(to_us "$(awk '$1 == "99%" { print $2 }' "$f")")
	local st
	st=$(grep '^STATUS ' "$f")
	for code in 201 429 503 401 other; do
		R[wrk_${name}_$code]=$(echo "$st" | tr ' ' '\n' | awk -F= -v c="$code" '$1 == c { print $2 }')
	done
	grep -q 'Socket errors' "$f" && note_error "wrk $name: $(grep 'Socket errors' "$f")"
	say "  wrk $name: ${R[wrk_${name}_rps]} req/s p50 ${R[wrk_${name}_p50]} us p99 ${R[wrk_${name}_p99]} us, HAProxy CPU ${R[wrk_${name}_cpu_us]:-?} us/req ($st)"
}

# softirq_ticks: clock ticks all CPUs have spent in softirq (/proc/stat).
softirq_ticks() { awk '$1 == "cpu" { print $8; exit }' /proc/stat; }

# proc_ticks PID: user + system clock ticks PID has used (0 without a PID).
proc_ticks() {
	[ -n "$1" ] || { echo 0; return; }
	awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}

# pick_median KIND NAME: of the rounds KIND_NAME_r1.._rN, copy the one with
# the median throughput to KIND_NAME_* (latency and counts of the same run,
# not medians of each), and keep the spread of the rounds.
pick_median() {
	local kind=$1 name=$2 i best k list=()
	for i in $(seq "$ROUNDS"); do
		[ -n "${R[${kind}_${name}_r${i}_rps]:-}" ] && list+=("${R[${kind}_${name}_r${i}_rps]} $i")
	done
	[ ${#list[@]} -gt 0 ] || return 0
	best=$(printf '%s\n' "${list[@]}" | sort -g | awk '{ a[NR] = $2 } END { print a[int((NR + 1) / 2)] }')
	for k in "${!R[@]}"; do
		[[ $k == "${kind}_${name}_r${best}_"* ]] && R[${kind}_${name}_${k#"${kind}_${name}_r${best}_"}]=${R[$k]}
	done
	R[${kind}_${name}_rounds]=$(printf '%s\n' "${list[@]}" | sort -g | awk '{ printf "%s%.0f", (NR > 1 ? "/" : ""), $1 }')
}

flush_redis() { redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null; }

# edge_ready PORT: until one request through the edge gets 201 (the agent
# was restarted: HAProxy's spop-check must see it UP again).
edge_ready() {
	local code i
	for i in $(seq 100); do
		code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 -X POST \
			-H "Authorization: Bearer $(head -n1 "$TOKENS")" "http://127.0.0.1:$1/transfers")
		[ "$code" = 201 ] && return 0
		sleep 0.2
	done
	return 1
}

# render_report TSV: the table on stdout, docs/benchmarks.md and the plot,
# from the results file of a run (BENCH_RENDER=file redoes only this).
render_report() {
python3 tools/bench-report.py "$1" "$OUT" "$PLOT" "$T" || die "report failed"
}

if [ -n "${BENCH_RENDER:-}" ]; then
	render_report "$BENCH_RENDER"
	exit 0
fi

# ---------------------------------------------------------------------------
# Step 1: Redis and the script
# ---------------------------------------------------------------------------
# The module too when it is built (make bench builds it): the no-JWT row of
# (c) runs with each engine; every other agent pins redis-engine script.
MODULE_SO=$ROOT/module/ratelimit.so
if [ -e "$MODULE_SO" ]; then
	REDIS_PORT=$(free_port)
	redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$T" --logfile "$T/redis-$REDIS_PORT.log" --daemonize no --loadmodule "$MODULE_SO" \
		--unixsocket "$T/redis.sock" --unixsocketperm 700 &
	REDIS_PID=$!
	t_track "$REDIS_PID"
	wait_port "$REDIS_PORT" || die "redis did not start with $MODULE_SO (see $T/redis-$REDIS_PORT.log)"
	[ "$(redis-cli -p "$REDIS_PORT" COMMAND INFO ratelimit.decide | head -n1)" = ratelimit.decide ] \
		|| die "redis-server loaded $MODULE_SO but has no RATELIMIT.DECIDE"
else
	MODULE_SO=
	say "bench: no module/ratelimit.so (make module): the no-JWT row runs with the script only"
	start_redis >/dev/null || die "redis did not start"
fi
SHA=$(redis-cli -p "$REDIS_PORT" SCRIPT LOAD "$(cat lua/sliding_window.lua)")
[ ${#SHA} -eq 40 ] || die "SCRIPT LOAD failed: $SHA"
say "bench: redis on $REDIS_PORT, script $SHA${MODULE_SO:+, module $MODULE_SO}"

# ---------------------------------------------------------------------------
# Step 2: (a) the Redis ceiling
# ---------------------------------------------------------------------------
# (a) and (b) alternate, round after round, so that a slow spell of the
# shared machine hits both sides of a ratio alike; each figure is the
# median round. The agent idles while redis-benchmark runs.
DENY_CACHE_OFF=
printf 'policy transfer 3/1s\ndeny-cache off\n' >"$T/probe.conf"
"$AGENT" -c -f "$T/probe.conf" >/dev/null 2>&1 && DENY_CACHE_OFF='deny-cache off'
# the steady state: not the hour after a start that counts 1.0.0's keys
LEGACY_OFF=$(legacy_keys_off)

start_bench_agent main ""
MAIN_AGENT_PID=$AGENT_PID
MAIN_AGENT_PORT=$AGENT_PORT
MAIN_METRICS_PORT=$METRICS_PORT
"$BENCH" -a "127.0.0.1:$AGENT_PORT" -c 4 -d 4 -n 2000 -q -k "$ACCOUNTS" || note_error "spoa-bench warm-up failed"
want a || want b && say "== (a) Redis ceiling (redis-benchmark EVALSHA) and (b) agent path (spoa-bench -> agent -> Redis), $ROUNDS rounds"
for i in $(seq "$ROUNDS"); do
	if want a; then
		redis_ceiling "p1_r$i" "$C_P1" 1; flush_redis
		redis_ceiling "p16_r$i" "$C_P16" 16; flush_redis
	fi
	if want b; then
		run_spoa_bench "p1_r$i" -c "$C_P1" -d 1; flush_redis
		run_spoa_bench "p16_r$i" -c "$C_P16" -d 16; flush_redis
		# the same with abusers: the deny cache at work
		c0=$(metric local_cache_answers_total)
		run_spoa_bench "mixed_r$i" -c "$C_P16" -d 16 --hot "$HOT_N" --hot-pct "$MIXED_PCT"; flush_redis
		R[sb_mixed_r${i}_cache]=$(( $(metric local_cache_answers_total) - c0 ))
		c0=$(metric local_cache_answers_total)
		run_spoa_bench "abuse_r$i" -c "$C_P16" -d 16 --hot "$HOT_N" --hot-pct 100; flush_redis
		R[sb_abuse_r${i}_cache]=$(( $(metric local_cache_answers_total) - c0 ))
	fi
done
for n in p1 p16; do pick_median rb $n; done
for n in p1 p16 mixed abuse; do pick_median sb $n; done

# ---------------------------------------------------------------------------
# Step 3: (f) Redis CPU per decision, batched vs redis-batch 1
# ---------------------------------------------------------------------------
# The same spoa-bench load at the agent path's usual depths (C_P1 x 1 and
# C_P16 x 16 in flight), once with the default redis-batch and once with 1:
# redis-server's process CPU per decision, and INFO commandstats (usec per
# decision, decisions per script call). The deny cache is off so that every
# decision reaches Redis.
# redis_script_stats: "calls usec" of EVALSHA + EVAL (and the module's
# RATELIMIT.DECIDE) since the last RESETSTAT.
redis_script_stats() {
	redis-cli -p "$REDIS_PORT" INFO commandstats | tr -d '\r' | awk -F'[:=,]' '
		$1 == "cmdstat_evalsha" || $1 == "cmdstat_eval" || $1 == "cmdstat_ratelimit.decide" { c += $3; u += $5 }
		END { printf "%d %d\n", c, u }'
}
if want f; then
say "== (f) Redis CPU per decision: redis-batch $BATCH_ON vs 1 (deny cache off)"
stop_bench_agent
for i in $(seq "$ROUNDS"); do
	for depth in "$C_P1 1" "$C_P16 16"; do
		read -r c d <<<"$depth"
		for b in "$BATCH_ON" 1; do
			name=rb${b}_$((c * d))_r$i
			start_bench_agent "batch$b" "redis-batch $b"$'\n'"$DENY_CACHE_OFF"
			"$BENCH" -a "127.0.0.1:$AGENT_PORT" -c 4 -d 4 -n 2000 -q -k "$ACCOUNTS" \
				|| note_error "spoa-bench warm-up ($name) failed"
			flush_redis
			redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
			t0=$(proc_ticks "$REDIS_PID")
			run_spoa_bench "$name" -c "$c" -d "$d"
			t1=$(proc_ticks "$REDIS_PID")
			read -r calls usec < <(redis_script_stats)
			dec=$(( ${R[sb_${name}_allow]:-0} + ${R[sb_${name}_deny]:-0} + ${R[sb_${name}_error]:-0} ))
			[ "$dec" -gt 0 ] && [ "$calls" -gt 0 ] || { note_error "(f) $name: no decisions"; stop_bench_agent; continue; }
			R[rf_${name}_rps]=${R[sb_${name}_rps]}
			R[rf_${name}_cpu_us]=$(awk -v t=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v n="$dec" \
				'BEGIN { printf "%.2f", t * 1e6 / hz / n }')
			R[rf_${name}_usec]=$(awk -v u="$usec" -v n="$dec" 'BEGIN { printf "%.2f", u / n }')
			R[rf_${name}_per_call]=$(awk -v c="$calls" -v n="$dec" 'BEGIN { printf "%.1f", n / c }')
			say "  redis-batch $b, $((c * d)) in flight: Redis CPU ${R[rf_${name}_cpu_us]} us/decision, script ${R[rf_${name}_usec]} us/decision, ${R[rf_${name}_per_call]} decisions/call"
			flush_redis
			stop_bench_agent
		done
	done
done
for b in "$BATCH_ON" 1; do
	for n in $((C_P1)) $((C_P16 * 16)); do pick_median rf "rb${b}_$n"; done
done
AGENT_PORT=$MAIN_AGENT_PORT; METRICS_PORT=$MAIN_METRICS_PORT; AGENT_PID=$MAIN_AGENT_PID
WANT_PORT=$MAIN_AGENT_PORT start_bench_agent main ""
MAIN_AGENT_PID=$AGENT_PID; MAIN_METRICS_PORT=$METRICS_PORT
fi # want f

# ---------------------------------------------------------------------------
# Step 4: (c) end to end through HAProxy
# ---------------------------------------------------------------------------
# (sections c and d are long: their bodies are not indented under the if)
if want c; then
say "== (c) end to end: wrk -> HAProxy [-> agent -> Redis]"
mkdir -p "$CACHE"
TOKENS=$CACHE/tokens-$ACCOUNTS.txt
now=$(date +%s)
# (.aud.exp: tokens cached before they carried the demo's aud are minted again)
exp=$(cat "$CACHE/tokens-$ACCOUNTS.aud.exp" 2>/dev/null || echo 0)
if [ ! -s "$CACHE/jwt/jwt-private.pem" ]; then
	tools/jwt.sh keygen "$CACHE/jwt" >/dev/null || die "jwt.sh keygen failed"
	rm -f "$TOKENS"
fi
if [ ! -s "$TOKENS" ] || [ "$exp" -lt $((now + 3600)) ] || [ "$(wc -l <"$TOKENS")" -ne "$ACCOUNTS" ]; then
	say "  minting $ACCOUNTS RS256 tokens (ACC-0..ACC-$((ACCOUNTS - 1)), valid 7 days) ..."
	# tools/jwt.sh mints one token per call (~4 openssl processes); the same
	# header and claims, signed in one process, take seconds instead of an hour
	python3 - "$CACHE/jwt/jwt-private.pem" "$ACCOUNTS" $((7 * 86400)) >"$TOKENS.tmp" <<-'PY' || die "minting failed"
	import base64, sys, time
	from cryptography.hazmat.primitives import hashes, serialization
	from cryptography.hazmat.primitives.asymmetric import padding
	key = serialization.load_pem_private_key(open(sys.argv[1], 'rb').read(), None)
	n, ttl = int(sys.argv[2]), int(sys.argv[3])
	b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b'=').decode()
	head = b64(b'{"alg":"RS256","typ":"JWT"}')
	now = int(time.time())
	for i in range(n):
	    body = b64(('{"iss":"ratelimit-spoa-demo","aud":"ratelimit-spoa-demo-api","iat":%d,"sub":"ACC-%d","exp":%d}'
	                % (now, i, now + ttl)).encode())
	    signing = head + '.' + body
	    sig = key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
	    sys.stdout.write(signing + '.' + b64(sig) + '\n')
	PY
	mv "$TOKENS.tmp" "$TOKENS"
	echo $((now + 7 * 86400)) >"$CACHE/tokens-$ACCOUNTS.aud.exp"
fi
[ "$(tools/jwt.sh decode "$(head -n1 "$TOKENS")" | tail -n1 | grep -c '"sub":"ACC-0"')" = 1 ] \
	|| die "token 0 does not decode as ACC-0"

# The demo backend (a separate HAProxy answering canned JSON).
BE_T=$(free_port)
BE_A=$(free_port)
RL_LOG=stdout RL_TRANSFERS_BIND=127.0.0.1:$BE_T RL_ACCOUNTS_BIND=127.0.0.1:$BE_A \
	"$HAPROXY" -db -f haproxy/backend.cfg >/dev/null 2>"$T/backend.log" &
t_track $!
wait_port "$BE_T" || die "backend did not start"

# HAProxy alone: the edge config with the SPOE filter and the rules that act
# on its verdict removed; the JWT checks, routes and headers stay.
tools/edge-alone.sh haproxy/haproxy.cfg >"$T/haproxy-alone.cfg" || die "tools/edge-alone.sh failed"

# start_bench_edge NAME CFG [AGENT-PORT]: HAProxy with the edge environment,
# asking the agent on AGENT-PORT (default the main one); sets EDGE_PORT and
# EDGE_PIDS[port]
# (not tests/lib.sh's start_edge: one instance, its log to /dev/null).
declare -A EDGE_PIDS
start_bench_edge() {
	local name=$1 cfg=$2 agent_port=${3:-$MAIN_AGENT_PORT} agent_addr extra=${4:-}
	# a port on loopback, or an address as is (unix@/path)
	agent_addr=127.0.0.1:$agent_port
	[[ $agent_port == *@* ]] && agent_addr=$agent_port
	EDGE_PORT=$(free_port)
	local envs=("RL_BIND=127.0.0.1:$EDGE_PORT" "RL_INSTANCE=bench-$name"
	            "RL_AGENT_ADDR=$agent_addr"
	            "RL_TRANSFERS_ADDR=127.0.0.1:$BE_T" "RL_ACCOUNTS_ADDR=127.0.0.1:$BE_A"
	            "RL_JWT_PUBKEY=$CACHE/jwt/jwt-public.pem" "RL_HAPROXY_DIR=$ROOT/haproxy"
	            "RL_ADMIN_SOCK=$T/admin-$name.sock" RL_LOG=stdout)
	# (an edge variable more, e.g. RL_IETF_ONLY=1: the lean answer)
	[ -z "$extra" ] || envs+=("$extra")
	env "${envs[@]}" "$HAPROXY" -c -q -f "$cfg" >"$T/edge-$name.check" 2>&1 \
		|| { cat "$T/edge-$name.check" >&2; die "haproxy refused $cfg"; }
	# the per-request log line is formatted as in production, written to /dev/null
	env "${envs[@]}" "$HAPROXY" -db -f "$cfg" >/dev/null 2>"$T/edge-$name.log" &
	t_track $!
	EDGE_PIDS[$EDGE_PORT]=$!
	wait_port "$EDGE_PORT" || die "edge $name did not start"
}

# smoke EDGE_PORT EXPECT: one request with token 0 must get EXPECT.
smoke() {
	local code
	code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X POST \
		-H "Authorization: Bearer $(head -n1 "$TOKENS")" "http://127.0.0.1:$1/transfers")
	[ "$code" = "$2" ] || die "smoke request on :$1 got $code, expected $2 (see $T/edge-*.log)"
}

# No JWT (the limiter's overhead alone, not hidden behind RS256): the same
# edges with the identity taken from a plain X-Bench-Account header instead
# of a verified token (a bench-only variant, never a deployment).
tools/edge-nojwt.sh "$T/haproxy-alone.cfg" >"$T/haproxy-alone-nojwt.cfg" || die "tools/edge-nojwt.sh failed"
tools/edge-nojwt.sh haproxy/haproxy.cfg >"$T/haproxy-nojwt.cfg" || die "tools/edge-nojwt.sh failed"
cat "$T/haproxy-nojwt.cfg" "$T/haproxy-alone-nojwt.cfg" | grep -v '^[[:space:]]*#' | grep -q 'jwt_verify' \
	&& die "could not strip the JWT check out of haproxy/haproxy.cfg (did its layout change?)"
IDS=$T/accounts.txt
seq 0 $((ACCOUNTS - 1)) | sed 's/^/ACC-/' >"$IDS"

# The self-answering shape: the same no-JWT edges answering by themselves
# (tools/edge-self.sh), no backend HAProxy behind them.
if [ "$SELF" = 1 ]; then
	tools/edge-self.sh "$T/haproxy-alone-nojwt.cfg" >"$T/self-alone.cfg" || die "tools/edge-self.sh failed"
	tools/edge-self.sh "$T/haproxy-nojwt.cfg" >"$T/self-full.cfg" || die "tools/edge-self.sh failed"
fi

start_bench_edge alone "$T/haproxy-alone.cfg"
ALONE_PORT=$EDGE_PORT
start_bench_edge full haproxy/haproxy.cfg
FULL_PORT=$EDGE_PORT
start_bench_edge alone_nojwt "$T/haproxy-alone-nojwt.cfg"
ALONE_NOJWT_PORT=$EDGE_PORT
start_bench_edge full_nojwt "$T/haproxy-nojwt.cfg"
FULL_NOJWT_PORT=$EDGE_PORT
smoke "$ALONE_PORT" 201
edge_ready "$FULL_PORT" || die "the edge never answered 201 through the agent (see $T/edge-full.log)"
flush_redis

# scenario_args SCEN: the wrk hot-set arguments of a scenario.
scenario_args() {
	case $1 in
	uniform) echo "0 0" ;;
	mixed) echo "$HOT_N $MIXED_PCT" ;;
	abuse) echo "$HOT_N 100" ;;
	esac
}

# Each round: HAProxy alone then end to end, scenario by scenario, so the
# two sides of each ratio run back to back.
AGENT_PORT=$MAIN_AGENT_PORT; METRICS_PORT=$MAIN_METRICS_PORT; AGENT_PID=$MAIN_AGENT_PID
[ "$JWT" = 1 ] || say "  (BENCH_JWT=0: no JWT rows)"
for i in $(seq "$((JWT == 1 ? ROUNDS : 0))"); do
	for scen in uniform mixed abuse; do
		# shellcheck disable=SC2046
		run_wrk "alone_${scen}_r$i" "$ALONE_PORT" $(scenario_args $scen)
		c0=$(metric local_cache_answers_total)
		# shellcheck disable=SC2046
		run_wrk "full_${scen}_r$i" "$FULL_PORT" $(scenario_args $scen)
		R[wrk_full_${scen}_r${i}_cache]=$(( $(metric local_cache_answers_total) - c0 ))
		flush_redis
	done
done
[ "$JWT" = 1 ] && for scen in uniform mixed abuse; do pick_median wrk "alone_$scen"; pick_median wrk "full_$scen"; done

# No JWT, uniform: HAProxy alone vs HAProxy + agent + Redis, and the CPU
# per request of each process of the limited path; with the module loaded,
# the same again through a second agent (redis-engine module) and its own
# edge: alone, script, module back to back in each round.
say "  no JWT (identity from a plain header):"
MOD_AGENT_PID=
if [ -n "$MODULE_SO" ]; then
	ENGINE=module start_bench_agent module ""
	MOD_AGENT_PID=$AGENT_PID
	MOD_METRICS_PORT=$METRICS_PORT
	FULL_NOJWT_MOD_AGENT_PORT=$AGENT_PORT
	start_bench_edge full_nojwt_mod "$T/haproxy-nojwt.cfg" "$AGENT_PORT"
	FULL_NOJWT_MOD_PORT=$EDGE_PORT
	AGENT_PORT=$MAIN_AGENT_PORT; METRICS_PORT=$MAIN_METRICS_PORT; AGENT_PID=$MAIN_AGENT_PID
fi
# The SPOE floor: the same no-JWT edge and SPOE rules, its agent
# bench/spoa-floor (fixed answers, no Redis).
FLOOR_PORT=$(free_port)
# shellcheck disable=SC2086
"$FLOOR" -a "127.0.0.1:$FLOOR_PORT" ${BENCH_FLOOR_ARGS:-} >"$T/floor.log" 2>&1 &
FLOOR_PID=$!
t_track "$FLOOR_PID"
wait_port "$FLOOR_PORT" 10 || die "spoa-floor did not start (see $T/floor.log)"
start_bench_edge full_nojwt_floor "$T/haproxy-nojwt.cfg" "$FLOOR_PORT"
FULL_NOJWT_FLOOR_PORT=$EDGE_PORT
# nojwt_ready PORT: until one request through a no-JWT edge gets 201.
nojwt_ready() {
	local code i
	for i in $(seq 100); do
		code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X POST -H "X-Bench-Account: BENCH-SMOKE" \
			"http://127.0.0.1:$1/transfers")
		[ "$code" = 201 ] && return 0
		sleep 0.2
	done
	note_error "no-JWT edge :$1 answered $code, expected 201"
	return 1
}
nojwt_ready "$FULL_NOJWT_PORT"
nojwt_ready "$FULL_NOJWT_FLOOR_PORT"
if [ "$SELF" = 1 ]; then
	start_bench_edge self_alone "$T/self-alone.cfg"
	SELF_ALONE_PORT=$EDGE_PORT
	start_bench_edge self_floor "$T/self-full.cfg" "$FLOOR_PORT"
	SELF_FLOOR_PORT=$EDGE_PORT
	start_bench_edge self_script "$T/self-full.cfg"
	SELF_SCRIPT_PORT=$EDGE_PORT
	nojwt_ready "$SELF_FLOOR_PORT"
	nojwt_ready "$SELF_SCRIPT_PORT"
	if [ -n "$MOD_AGENT_PID" ]; then
		start_bench_edge self_mod "$T/self-full.cfg" "$FULL_NOJWT_MOD_AGENT_PORT"
		SELF_MOD_PORT=$EDGE_PORT
		nojwt_ready "$SELF_MOD_PORT"
		# the module again, the lean answer (RL_IETF_ONLY: the IETF pair
		# only, three variables on an admission against the floor's seven)
		start_bench_edge self_mod_lean "$T/self-full.cfg" "$FULL_NOJWT_MOD_AGENT_PORT" RL_IETF_ONLY=1
		SELF_MOD_LEAN_PORT=$EDGE_PORT
		nojwt_ready "$SELF_MOD_LEAN_PORT"
		# the module again, unix sockets on both legs: HAProxy -> agent
		# (listen unix:, server unix@) and agent -> Redis (unix://)
		LISTEN=unix:$T/agent-unix.sock REDIS_URL=unix://$T/redis.sock ENGINE=module \
			start_bench_agent mod_unix ""
		UNIX_AGENT_PID=$AGENT_PID
		AGENT_PORT=$MAIN_AGENT_PORT; METRICS_PORT=$MAIN_METRICS_PORT; AGENT_PID=$MAIN_AGENT_PID
		start_bench_edge self_mod_unix "$T/self-full.cfg" "unix@$T/agent-unix.sock"
		SELF_MOD_UNIX_PORT=$EDGE_PORT
		nojwt_ready "$SELF_MOD_UNIX_PORT"
	fi
fi
if [ -n "$MOD_AGENT_PID" ]; then
	nojwt_ready "$FULL_NOJWT_MOD_PORT"
	# the module agent must have decided with the module, not fallen back
	eng=$(curl -s --max-time 2 "http://127.0.0.1:$MOD_METRICS_PORT/metrics" |
		awk '/^ratelimit_spoa_redis_engine\{engine="module"\}/ { print $2 }')
	[ "${eng:-0}" = 1 ] || note_error "the module agent's engine gauge reads ${eng:-nothing} (module not in use?)"
fi
hz=$(getconf CLK_TCK)
# full_nojwt NAME PORT AGENT-PID: one no-JWT e2e run, with the agent's and
# redis-server's CPU per request (R[wrk_NAME_agent_us], R[wrk_NAME_redis_us]).
full_nojwt() {
	local name=$1 port=$2 apid=$3 a0 r0 a1 r1 n calls usec
	redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
	a0=$(proc_ticks "$apid"); r0=$(proc_ticks "$REDIS_PID")
	run_wrk "$name" "$port" 0 0 "$IDS" header
	a1=$(proc_ticks "$apid"); r1=$(proc_ticks "$REDIS_PID")
	read -r calls usec < <(redis_script_stats)
	n=$(awk '/ requests in / { print $1 }' "$T/wrk-$name.out")
	if [ "${n:-0}" -gt 0 ]; then
		R[wrk_${name}_agent_us]=$(awk -v t=$((a1 - a0)) -v hz="$hz" -v n="$n" 'BEGIN { printf "%.1f", t * 1e6 / hz / n }')
		R[wrk_${name}_redis_us]=$(awk -v t=$((r1 - r0)) -v hz="$hz" -v n="$n" 'BEGIN { printf "%.1f", t * 1e6 / hz / n }')
		# every request of this uniform load is one decision in Redis
		# (none over its limit): how many a call carried
		[ "${calls:-0}" -eq 0 ] ||
			R[wrk_${name}_dpc]=$(awk -v c="$calls" -v n="$n" 'BEGIN { printf "%.1f", n / c }')
		say "    per request: agent ${R[wrk_${name}_agent_us]} us, redis-server ${R[wrk_${name}_redis_us]} us of CPU${R[wrk_${name}_dpc]:+; ${R[wrk_${name}_dpc]} decisions per Redis call}"
	fi
	flush_redis
}
# Each round: alone, floor, script, module back to back; at the reported
# shape (-t $WRK_THREADS -c $WRK_CONNS, keys without a suffix), then at
# $SHAPE2 (keys ending _sTxC).
R[shape2]=$SHAPE2
for shape in "" $SHAPE2; do
	sfx=${shape:+_s$shape}
	REPORT_THREADS=$WRK_THREADS REPORT_CONNS=$WRK_CONNS
	[ -z "$shape" ] || { WRK_THREADS=${shape%x*}; WRK_CONNS=${shape#*x}; }
	say "    load shape -t $WRK_THREADS -c $WRK_CONNS:"
	for i in $(seq "$ROUNDS"); do
		run_wrk "alone_nojwt${sfx}_r$i" "$ALONE_NOJWT_PORT" 0 0 "$IDS" header
		full_nojwt "full_nojwt_floor${sfx}_r$i" "$FULL_NOJWT_FLOOR_PORT" "$FLOOR_PID"
		full_nojwt "full_nojwt${sfx}_r$i" "$FULL_NOJWT_PORT" "$MAIN_AGENT_PID"
		[ -z "$MOD_AGENT_PID" ] || full_nojwt "full_nojwt_mod${sfx}_r$i" "$FULL_NOJWT_MOD_PORT" "$MOD_AGENT_PID"
	done
	# the self-answering shape, at the reported load shape only
	if [ "$SELF" = 1 ] && [ -z "$shape" ]; then
		say "    self-answering (HAProxy answers 201 itself, no backend):"
		for i in $(seq "$ROUNDS"); do
			run_wrk "self_alone_r$i" "$SELF_ALONE_PORT" 0 0 "$IDS" header
			full_nojwt "self_floor_r$i" "$SELF_FLOOR_PORT" "$FLOOR_PID"
			full_nojwt "self_script_r$i" "$SELF_SCRIPT_PORT" "$MAIN_AGENT_PID"
			[ -z "$MOD_AGENT_PID" ] || full_nojwt "self_mod_r$i" "$SELF_MOD_PORT" "$MOD_AGENT_PID"
			[ -z "$MOD_AGENT_PID" ] || full_nojwt "self_mod_lean_r$i" "$SELF_MOD_LEAN_PORT" "$MOD_AGENT_PID"
			[ -z "$MOD_AGENT_PID" ] || full_nojwt "self_mod_unix_r$i" "$SELF_MOD_UNIX_PORT" "$UNIX_AGENT_PID"
		done
		for n in self_alone self_floor self_script self_mod self_mod_lean self_mod_unix; do pick_median wrk "$n"; done
	fi
	WRK_THREADS=$REPORT_THREADS WRK_CONNS=$REPORT_CONNS
	pick_median wrk "alone_nojwt$sfx"; pick_median wrk "full_nojwt_floor$sfx"; pick_median wrk "full_nojwt$sfx"
	[ -z "$MOD_AGENT_PID" ] || pick_median wrk "full_nojwt_mod$sfx"
done
[ -z "$MOD_AGENT_PID" ] || AGENT_PID=$MOD_AGENT_PID stop_bench_agent
[ -z "${UNIX_AGENT_PID:-}" ] || AGENT_PID=$UNIX_AGENT_PID stop_bench_agent
kill -TERM "$FLOOR_PID" 2>/dev/null
R[agent_hwm_kb]=$(hwm_kb "$MAIN_AGENT_PID")

# The deny cache off, for comparison (when the agent has the switch).
if [ -n "$DENY_CACHE_OFF" ] && [ "$JWT" = 1 ]; then
	say "  deny cache off ($DENY_CACHE_OFF):"
	stop_bench_agent
	# the edge keeps its agent address: same port
	WANT_PORT=$MAIN_AGENT_PORT start_bench_agent nocache "$DENY_CACHE_OFF"
	edge_ready "$FULL_PORT" || die "the edge never answered 201 through the restarted agent"
	for i in $(seq "$ROUNDS"); do
		for scen in mixed abuse; do
			# shellcheck disable=SC2046
			run_wrk "alone_${scen}_nc_r$i" "$ALONE_PORT" $(scenario_args $scen)
			# shellcheck disable=SC2046
			run_wrk "full_${scen}_nocache_r$i" "$FULL_PORT" $(scenario_args $scen)
			flush_redis
		done
		run_spoa_bench "abuse_nocache_r$i" -c "$C_P16" -d 16 --hot "$HOT_N" --hot-pct 100
		flush_redis
	done
	for scen in mixed abuse; do pick_median wrk "alone_${scen}_nc"; pick_median wrk "full_${scen}_nocache"; done
	pick_median sb abuse_nocache
fi
fi # want c
stop_bench_agent

# ---------------------------------------------------------------------------
# Step 5: (d) memory: RSS with 1,000 idle connections; mallocs per decision
# ---------------------------------------------------------------------------
if want d; then
say "== (d) memory"
start_bench_agent idle ""
sleep 0.5
R[rss_start_kb]=$(rss_kb "$AGENT_PID")
"$BENCH" -a "127.0.0.1:$AGENT_PORT" -c 0 --idle 1000 -t $((SECS + 3))s -T 2 -q 2>"$T/idle.err" &
IDLE_PID=$!
t_track "$IDLE_PID"
for _ in $(seq 200); do grep -q 'idle connection(s) ready' "$T/idle.err" && break; sleep 0.1; done
grep -q 'idle connection(s) ready' "$T/idle.err" || note_error "1,000 idle connections did not come up: $(tail -n1 "$T/idle.err")"
sleep 1
R[rss_idle_kb]=$(rss_kb "$AGENT_PID")
R[idle_conns]=$(metric connections_open)
wait "$IDLE_PID" || note_error "spoa-bench --idle exited non-zero: $(tail -n1 "$T/idle.err")"
say "  agent RSS: ${R[rss_start_kb]} kB at start, ${R[rss_idle_kb]} kB with 1,000 idle connections (open per metrics: ${R[idle_conns]})"
stop_bench_agent

# Allocation calls by the object that called them (bench/mcount.c, an
# LD_PRELOAD counter that make bench builds), read from a shared file while
# the agent runs.
# mc_read: "agent hiredis libev other" counts so far.
mc_read() { od -An -t u8 -N 32 -w32 "$T/mcount.bin" | awk '{ print $1, $2, $3, $4 }'; }

# mc_per_request NAME N BENCH-ARGS...: mallocs per decision over N requests.
mc_per_request() {
	local name=$1 n=$2 a b; shift 2
	a=$(mc_read)
	"$BENCH" -a "127.0.0.1:$AGENT_PORT" -n "$n" -k "$ACCOUNTS" -q "$@" || note_error "spoa-bench (malloc $name) failed"
	sleep 0.2
	b=$(mc_read)
	read -r "R[mc_${name}_agent]" "R[mc_${name}_hiredis]" "R[mc_${name}_libev]" "R[mc_${name}_other]" < <(
		awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { split(a, x, " "); split(b, y, " ");
			for (i = 1; i <= 4; i++) printf "%.3f ", (y[i] - x[i]) / n; print "" }')
	say "  mallocs per decision ($name): agent ${R[mc_${name}_agent]}, libhiredis ${R[mc_${name}_hiredis]}, libev ${R[mc_${name}_libev]}, other ${R[mc_${name}_other]}"
}

if [ -r "$MCOUNT" ]; then
	start_bench_agent malloc "" MCOUNT_FILE="$T/mcount.bin" LD_PRELOAD="$MCOUNT"
	# warm-up: connections, pools and the deny cache reach their steady size
	"$BENCH" -a "127.0.0.1:$AGENT_PORT" -c 8 -d 16 -n 50000 -q -k "$ACCOUNTS" \
		--hot "$HOT_N" --hot-pct "$MIXED_PCT" || note_error "spoa-bench warm-up (malloc) failed"
	mc_per_request uniform 100000 -c 8 -d 16
	mc_per_request abuse 100000 -c 8 -d 16 --hot "$HOT_N" --hot-pct 100
	stop_bench_agent
else
	note_error "no malloc counter at $MCOUNT (make bench builds it)"
fi
fi # want d

# ---------------------------------------------------------------------------
# Step 6: (e) profile of the agent path
# ---------------------------------------------------------------------------
PROFILE=
if want e && [ "$PERF" = 1 ] && command -v perf >/dev/null; then
	say "== (e) profile: perf record on the agent during spoa-bench -c $C_P16 -d 16"
	start_bench_agent perf ""
	"$BENCH" -a "127.0.0.1:$AGENT_PORT" -c "$C_P16" -d 16 -t $((SECS + 2))s -k "$ACCOUNTS" -q &
	PB=$!; t_track "$PB"
	sleep 1
	if timeout $((SECS + 10)) perf record -q -o "$T/perf.data" -p "$AGENT_PID" -- sleep "$SECS" \
		>"$T/perf.log" 2>&1; then
		# by object, then the hottest symbols (perf pads with '-' columns: cut them)
		PROFILE=$( { perf report -q -i "$T/perf.data" --no-children --sort dso --stdio </dev/null |
				grep -v '^[[:space:]]*$'
			echo
			perf report -q -i "$T/perf.data" --no-children --sort dso,symbol --percent-limit 2 \
				--stdio </dev/null | grep -v '^[[:space:]]*$' | head -n 15
			} 2>/dev/null | sed -e 's/\([[:space:]]*-\)*[[:space:]]*$//')
	else
		note_error "perf record failed: $(tail -n1 "$T/perf.log")"
	fi
	wait "$PB"
	stop_bench_agent
fi

if want i; then
	say "== (i) Redis instructions per decision, redis-batch 32 / 3 / 1, script and module (tools/bench-redis-ir.sh)"
	if BENCH_IR_TSV="$T/ir.tsv" BENCH_IR_ALGOS="${BENCH_IR_ALGOS:-log gcra pool}" \
		tools/bench-redis-ir.sh >&2; then
		while IFS=$'\t' read -r k v; do R[$k]=$v; done <"$T/ir.tsv"
	else
		note_error "bench-redis-ir.sh failed"
	fi
	# the module's Redis CPU per decision beside the script's (make module)
	if [ -e module/ratelimit.so ]; then
		if BENCH_CPU_TSV="$T/cpu.tsv" tools/bench-module-cpu.sh >&2; then
			while IFS=$'\t' read -r k v; do R[$k]=$v; done <"$T/cpu.tsv"
		else
			note_error "bench-module-cpu.sh failed"
		fi
	fi
fi

if want h; then
	say "== (h) HAProxy instructions per request, the full answer against the lean one (tools/bench-haproxy-ir.sh)"
	if HAPROXY=$HAPROXY BENCH_HIR_STRACE=0 BENCH_HIR_TSV="$T/hir.tsv" tools/bench-haproxy-ir.sh module module+ietf module+nodone lease >&2; then
		while IFS=$'\t' read -r k v; do
			case $k in
			hir_module) R[hir_full]=$v ;;
			hir_module+ietf) R[hir_lean]=$v ;;
			hir_module+nodone) R[hir_nodone]=$v ;;
			hir_lease) R[hir_lease]=$v ;;
			esac
		done <"$T/hir.tsv"
	else
		note_error "bench-haproxy-ir.sh failed"
	fi
	# the agent's side of the same message: an inflight= policy with and
	# without ratelimit-done (a policy without inflight= is sent none: the
	# edge's rule is conditional on txn.rl.lease), counted the same way
	if [ -e module/ratelimit.so ]; then
		say "== (h) the agent's instructions per request, ratelimit-done (tools/bench-agent-ir.sh)"
		R[air_shape]=${BENCH_AIR_SHAPES:-4x16}
		if BENCH_AIR_ENGINES="module module+inflight module+done" BENCH_AIR_SHAPES="${R[air_shape]}" \
			BENCH_AIR_TOP=0 BENCH_AIR_TSV="$T/air.tsv" tools/bench-agent-ir.sh >&2; then
			while IFS=$'\t' read -r k v; do R[$k]=$v; done <"$T/air.tsv"
		else
			note_error "bench-agent-ir.sh failed"
		fi
	fi
fi

if want u; then
	say "== (u) the loopback legs, TCP against unix sockets (tools/bench-legs.sh)"
	if BENCH_LEGS_TSV="$T/legs.tsv" tools/bench-legs.sh >&2; then
		while IFS=$'\t' read -r k v; do R[$k]=$v; done <"$T/legs.tsv"
	else
		note_error "bench-legs.sh failed"
	fi
fi

if want m; then
	say "== (m) Redis memory per busy account, log vs precision= (tools/bench-memory.sh)"
	if BENCH_MEM_TSV="$T/mem.tsv" tools/bench-memory.sh >&2; then
		while IFS=$'\t' read -r k v; do R[$k]=$v; done <"$T/mem.tsv"
	else
		note_error "bench-memory.sh failed"
	fi
fi

# ---------------------------------------------------------------------------
# Step 7: the table, docs/benchmarks.md and the plot
# ---------------------------------------------------------------------------
R[date]=$(date -u '+%Y-%m-%d %H:%M UTC')
R[nproc]=$(nproc)
R[cpu]=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
R[kernel]=$(uname -r)
R[haproxy]=$("$HAPROXY" -v | awk 'NR == 1 { print $3 }')
R[redis]=$(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')
R[wrk_threads]=$WRK_THREADS; R[wrk_conns]=$WRK_CONNS; R[secs]=$SECS
R[c_p1]=$C_P1; R[c_p16]=$C_P16; R[accounts]=$ACCOUNTS; R[hot]=$HOT_N; R[mixed_pct]=$MIXED_PCT
R[batch_on]=$BATCH_ON; R[limit]=$POLICY_LIMIT; R[deny_cache_switch]=${DENY_CACHE_OFF:+yes}
R[errors]=
[ ${#ERRORS[@]} -eq 0 ] || R[errors]=$(printf '%s; ' "${ERRORS[@]}")
R[profile]=$PROFILE
R[rounds]=$ROUNDS
R[command]="make bench (BENCH_SECS=$SECS BENCH_ROUNDS=$ROUNDS BENCH_WRK_CONNS=$WRK_CONNS${BENCH_SECTIONS:+ BENCH_SECTIONS=\"$BENCH_SECTIONS\"})"
R[commit]=$(git rev-parse --short HEAD 2>/dev/null || echo '?')

for k in "${!R[@]}"; do printf '%s\t%s\n' "$k" "${R[$k]//$'\n'/\\n}"; done >"$T/results.tsv"
mkdir -p "$CACHE" && cp "$T/results.tsv" "$CACHE/results-last.tsv"
render_report "$T/results.tsv"
[ ${#ERRORS[@]} -eq 0 ] || { say "bench: ${#ERRORS[@]} run(s) not clean:"; printf '  %s\n' "${ERRORS[@]}" >&2; }
exit 0
