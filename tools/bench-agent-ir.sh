#!/usr/bin/env bash
# bench-agent-ir.sh - instructions the agent (and the SPOE floor,
# bench/spoa-floor) executes per decision, counted by callgrind: from the
# NOTIFY's bytes in to the ACK's bytes out, Redis answering (a real
# redis-server, the module loaded when module/ratelimit.so is built), and
# the syscalls per decision (strace -c on a second, uncounted run, when
# strace is installed).
#
# Why instructions: counted instructions do not drift with the load of a
# shared box; CPU time does. What runs: the agent (threads 1) under
# callgrind, spoa-bench -n WARM to warm it up (connections, pools, Redis
# keys), the counters zeroed (callgrind_control -z), spoa-bench -n N on
# 10,000 accounts at 20/1s (all allowed, every decision reaches Redis),
# one dump (callgrind_control -d): its total / N. Start-up and warm-up are
# outside the count. The same for bench/spoa-floor (no Redis): what SPOP
# alone costs in the same loop shape.
#
# Engine variants (issue 38: what the response message costs the agent):
#   <engine>            policy transfer 20/1s (no lease: no ratelimit-done)
#   <engine>+inflight   policy transfer 20/1s inflight=1000 lease=10m, the
#                       leases never released (what inflight= adds to the
#                       check alone)
#   <engine>+done       the same policy, and spoa-bench --done: each
#                       admission's ratelimit-done, as HAProxy sends it at
#                       the response; a request is then check + done, and
#                       the count waits until Redis holds no lease (every
#                       release answered) before it is dumped
# Per request is per ratelimit message, done included; with +inflight and
# +done measured in one shape it prints the difference: what ratelimit-done
# costs the agent per request.
#
# Prints a table and the hottest functions (self, callgrind_annotate); with
# BENCH_AIR_TSV=FILE also writes name<TAB>value lines (air_<engine>_c<C>d<D>
# = instructions per decision, air_sys_<engine>_c<C>d<D> = syscalls per
# decision; air_done_<engine>_c<C>d<D> and air_sys_done_<engine>_c<C>d<D>,
# the +done row less the +inflight row). Knobs: BENCH_AIR_N=20000,
# BENCH_AIR_WARM=5000, BENCH_AIR_SHAPES="4x16 16x1 16x4s" (connections x
# depth; a trailing "s": spoa-bench --split, one write per NOTIFY: 16x4s is
# the shape HAProxy 3.x gives the agent, a NOTIFY per sendto, at most 20 in
# flight per connection, frames spread over more connections; 4x16 is
# 2.6's, NOTIFYs batched per write; 16x1 one frame per read),
# BENCH_AIR_ENGINES="floor module script" (module only when
# module/ratelimit.so is built; e.g. "module module+inflight module+done"),
# BENCH_AIR_TOP=25 (functions listed), T_KEEP=1 keeps every dump.
# About a minute per engine and shape.
# The shapes' syscall counts depend on timing (how many frames one read
# finds); the instruction counts on it much less.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=../tests/lib.sh
. tests/lib.sh
t_setup
for t in valgrind callgrind_control callgrind_annotate redis-server redis-cli; do
	command -v "$t" >/dev/null || { echo "bench-agent-ir: $t not found (make deps)" >&2; exit 1; }
done
N=${BENCH_AIR_N:-20000}
WARM=${BENCH_AIR_WARM:-5000}
SHAPES=${BENCH_AIR_SHAPES:-4x16 16x1 16x4s}
ENGINES=${BENCH_AIR_ENGINES:-floor module script}
TOP=${BENCH_AIR_TOP:-25}
TSV=${BENCH_AIR_TSV:-}
# strace is optional (not in make deps): without it, no syscall column
STRACE=$(command -v strace)
FAILED=0
FLOOR=${FLOOR:-$(dirname "$BENCH")/spoa-floor}
MODULE_SO=$PWD/module/ratelimit.so
# (the steady state: not the hour after a start that counts 1.0.0's keys)
LEGACY_OFF=$(legacy_keys_off)
if [ ! -x "$AGENT" ] || [ ! -x "$BENCH" ] || [ ! -x "$FLOOR" ]; then
	echo "bench-agent-ir: build first (make)" >&2
	exit 1
fi
if [ ! -e "$MODULE_SO" ]; then
	echo "bench-agent-ir: no $MODULE_SO (make module): no module row" >&2
	ENGINES=$(for e in $ENGINES; do [ "${e%%+*}" = module ] || printf '%s ' "$e"; done)
	start_redis >/dev/null || exit 1
else
	REDIS_PORT=$(free_port)
	redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
		--logfile "$T/redis.log" --loadmodule "$MODULE_SO" &
	t_track $!
	wait_port "$REDIS_PORT" || { echo "bench-agent-ir: redis did not start" >&2; exit 1; }
fi

# variant ENGINE: its variant after the '+' ("" for none); sets BASE (the
# redis-engine), POLICY (the policy line) and DONE (spoa-bench's option).
variant() {
	BASE=${1%%+*} POLICY="policy transfer 20/1s" DONE=
	case $1 in
	*+*) case ${1#*+} in
		inflight) POLICY="$POLICY inflight=1000 lease=10m" ;;
		done) POLICY="$POLICY inflight=1000 lease=10m" DONE=--done ;;
		*) echo "bench-agent-ir: unknown variant $1 (+inflight, +done)" >&2; return 1 ;;
		esac ;;
	esac
}

# leases_released: until Redis holds no lease (the agent answers a
# ratelimit-done at once and releases behind it), at most 30 s; 0 or 1.
leases_released() {
	local _
	for _ in $(seq 300); do
		[ "$(redis-cli -p "$REDIS_PORT" EVAL "return #redis.call('KEYS', 'transfer:inflight:*')" 0)" = 0 ] && return 0
		sleep 0.1
	done
	echo "bench-agent-ir: leases still held in Redis 30 s after the load: was no ratelimit-done sent?" >&2
	return 1
}

# start ENGINE: the agent (or the floor) on a fresh port, under the command
# in $WRAP (callgrind or strace), on an empty Redis (no leases nor windows
# of a row before); sets PORT and PID.
start() {
	local e=$1
	PORT=$(free_port)
	variant "$e" || return 1
	redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
	if [ "$e" = floor ]; then
		$WRAP "$FLOOR" -a "127.0.0.1:$PORT" >"$T/$e.$2.log" 2>&1 &
	else
		cat >"$T/agent-$e.conf" <<-CONF
		listen        127.0.0.1:$PORT
		redis         redis://127.0.0.1:$REDIS_PORT/0
		redis-timeout 10s
		threads       1
		log-level     warn
		$POLICY
		redis-engine  $BASE
		$LEGACY_OFF
		CONF
		$WRAP "$AGENT" -f "$T/agent-$e.conf" >"$T/$e.$2.log" 2>&1 &
	fi
	PID=$!
	t_track "$PID"
	wait_port "$PORT" 60 || { echo "bench-agent-ir: $e did not start ($T/$e.$2.log)" >&2; return 1; }
}

# load C D COUNT: spoa-bench, every NOTIFY answered (allow, deny or error);
# $SPLIT is --split for an "s" shape. With --done ($DONE, the +done
# variant) each admission's ratelimit-done too.
load() {
	# shellcheck disable=SC2086
	"$BENCH" -a "127.0.0.1:$PORT" -c "$1" -d "$2" -n "$3" -k 10000 -p transfer --strict -q $SPLIT $DONE
}

stop() {
	kill -TERM "$PID" 2>/dev/null
	wait_gone "$PID" 30 || kill -KILL "$PID" 2>/dev/null
	wait "$PID" 2>/dev/null
}

declare -A IR SYS
printf '%-16s %-12s %24s %20s\n' engine "conn x depth" "instructions/decision" "syscalls/decision"
for shape in $SHAPES; do
	c=${shape%x*} d=${shape#*x} SPLIT= sfx=
	[ "${d%s}" = "$d" ] || { d=${d%s} SPLIT=--split sfx=s; }
	for e in $ENGINES; do
		name=${e}_c${c}d$d$sfx
		# callgrind: instructions
		WRAP="valgrind --tool=callgrind --dump-instr=no --callgrind-out-file=$T/cg.$name.%p"
		start "$e" "$name" || { FAILED=1; continue; }
		load "$c" "$d" "$WARM" || echo "bench-agent-ir: $name warm-up failed" >&2
		[ -z "$DONE" ] || leases_released || { stop; FAILED=1; continue; }
		callgrind_control -z "$PID" >/dev/null 2>&1
		if ! load "$c" "$d" "$N"; then
			echo "bench-agent-ir: $name: spoa-bench failed (errors in the answers?)" >&2
			stop; FAILED=1; continue
		fi
		# the releases behind the last ACKs are the agent's work too
		[ -z "$DONE" ] || leases_released || { stop; FAILED=1; continue; }
		callgrind_control -d "$PID" >/dev/null 2>&1
		stop
		f=$(find "$T" -name "cg.$name.*.1" | head -n 1)
		ir=
		if [ -n "$f" ]; then
			callgrind_annotate --inclusive=no --auto=no --threshold=100 "$f" >"$T/annotate.$name" 2>/dev/null
			ir=$(awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }' "$T/annotate.$name")
		fi
		[ -n "$ir" ] || { echo "bench-agent-ir: $name: no count" >&2; FAILED=1; continue; }
		# strace: syscalls of every thread over the same load, warm-up excluded
		sys=-
		if [ -n "$STRACE" ]; then
			WRAP=
			start "$e" "$name.strace" || { FAILED=1; continue; }
			load "$c" "$d" "$WARM" >/dev/null
			[ -z "$DONE" ] || leases_released || FAILED=1
			"$STRACE" -f -c -o "$T/strace.$name" -p "$PID" 2>/dev/null &
			sp=$!
			sleep 1
			load "$c" "$d" "$N" || echo "bench-agent-ir: $name: strace run failed" >&2
			[ -z "$DONE" ] || leases_released || FAILED=1
			kill -INT "$sp" 2>/dev/null; wait "$sp" 2>/dev/null
			stop
			sys=$(awk -v n="$N" '$NF == "total" { printf "%.2f", $4 / n }' "$T/strace.$name" 2>/dev/null)
		fi
		printf '%-16s %-12s %24s %20s\n' "$e" "$c x $d${SPLIT:+ split}" "$((ir / N))" "${sys:--}"
		IR[$name]=$((ir / N)) SYS[$name]=${sys:--}
		if [ -n "$TSV" ]; then
			printf 'air_%s\t%s\n' "$name" "$((ir / N))" >>"$TSV"
			[ "${sys:--}" = - ] || printf 'air_sys_%s\t%s\n' "$name" "$sys" >>"$TSV"
		fi
		{
			echo "  $name, hottest functions (self instructions per decision, % of the total):"
			# self cost; the frames every instruction runs under (100%) left out
			awk -v n="$N" -v top="$TOP" '/ file:function$/ { on = 1; next }
				on && /^ *[0-9,]+ \(/ && !/\(100\.0%\)/ && k < top {
				v = $1; gsub(",", "", v); sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "")
				printf "    %8.0f  %s\n", v / n, $0; k++ }' "$T/annotate.$name"
			[ -z "$STRACE" ] || echo "  syscalls (strace -c, every thread):"
			[ -z "$STRACE" ] || sed -n '3,20p' "$T/strace.$name" | sed 's/^/    /'
		} >>"$T/detail"
	done
done
# what ratelimit-done costs the agent per request: +done less +inflight
for shape in $SHAPES; do
	c=${shape%x*} d=${shape#*x}
	for e in $ENGINES; do
		case $e in *+done) ;; *) continue ;; esac
		b=${e%%+*} sfx=_c${c}d$d
		with=${IR[$e$sfx]:-} without=${IR[$b+inflight$sfx]:-} plain=${IR[$b$sfx]:-}
		if [ -z "$with" ] || [ -z "$without" ]; then continue; fi
		dsys=-
		if [ "${SYS[$e$sfx]:--}" != - ] && [ "${SYS[$b+inflight$sfx]:--}" != - ]; then
			dsys=$(awk -v a="${SYS[$e$sfx]}" -v b="${SYS[$b+inflight$sfx]}" 'BEGIN { printf "%+.2f", a - b }')
		fi
		printf '%s, %s x %s: ratelimit-done costs the agent %+d instructions and %s syscalls per request (%s+done %s, %s+inflight %s' \
			"$b" "$c" "$d" "$((with - without))" "$dsys" "$b" "$with" "$b" "$without"
		[ -z "$plain" ] || printf '; inflight= itself %+d on the check, %s without it %s' \
			"$((without - plain))" "$b" "$plain"
		printf ')\n'
		if [ -n "$TSV" ]; then
			printf 'air_done_%s\t%s\n' "$b$sfx" "$((with - without))" >>"$TSV"
			[ "$dsys" = - ] || printf 'air_sys_done_%s\t%s\n' "$b$sfx" "$dsys" >>"$TSV"
		fi
	done
done
echo
cat "$T/detail" 2>/dev/null
exit "$FAILED"
