#!/usr/bin/env bash
# bench-legs.sh - what the two loopback legs cost, TCP against unix
# sockets: HAProxy -> agent (the agent's "listen", played here by
# spoa-bench) and agent -> Redis (the agent's "redis"). Layouts:
#   tcp    listen 127.0.0.1:P        redis redis://127.0.0.1:R
#   unix1  listen unix:/path         redis redis://127.0.0.1:R
#   unix   listen unix:/path         redis unix:///path
# Each round runs every layout once, back to back (a slow spell of the
# shared machine hits all alike): a fresh agent (redis-engine module when
# module/ratelimit.so exists, else script), a warm-up, then a fixed count
# of decisions (spoa-bench -c 8 -d 16 -n N, all allowed); the CPU that the
# agent, redis-server and spoa-bench used (user and system, /proc/PID/stat)
# and the machine's softirq time (/proc/stat) over those N, per decision.
# A fixed count, not a fixed time: what is divided is the work itself.
# Kernel work of a loopback send (the receiver's softirq included) is
# mostly charged to the sending process's system time on this kind of VM,
# so read "system" first; softirq is the whole machine's (other load on
# the box shows up there too).
#
#   tools/bench-legs.sh            (make bench runs it as section u)
#
# Knobs: BENCH_LEGS_N=200000, BENCH_LEGS_ROUNDS=3, BENCH_LEGS_SHAPE=8x16,
# BENCH_LEGS_TSV=FILE (name<TAB>value: legs_<layout>_<proc>_us, proc one
# of agent, redis, client, sirq, total; the median round's), T_KEEP=1.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=../tests/lib.sh
. tests/lib.sh
t_setup
N=${BENCH_LEGS_N:-200000}
ROUNDS=${BENCH_LEGS_ROUNDS:-3}
SHAPE=${BENCH_LEGS_SHAPE:-8x16}
TSV=${BENCH_LEGS_TSV:-}
C=${SHAPE%x*} D=${SHAPE#*x}
HZ=$(getconf CLK_TCK)
die() { echo "bench-legs: $*" >&2; exit 1; }
[ -x "$AGENT" ] && [ -x "$BENCH" ] || die "no $AGENT or $BENCH (make)"

MODULE_SO=$PWD/module/ratelimit.so
ENGINE=script
LOAD=()
[ -e "$MODULE_SO" ] && { ENGINE=module; LOAD=(--loadmodule "$MODULE_SO"); }
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --unixsocket "$T/redis.sock" --unixsocketperm 700 \
	--save '' --appendonly no --dir "$T" --logfile "$T/redis.log" --daemonize no "${LOAD[@]}" &
REDIS_PID=$!
t_track "$REDIS_PID"
wait_port "$REDIS_PORT" || die "redis did not start"

# ticks PID: "user system" clock ticks of PID.
ticks() { awk '{ sub(/^.*\) /, ""); print $12, $13 }' "/proc/$1/stat"; }
sirq() { awk '$1 == "cpu" { print $8; exit }' /proc/stat; }

# run LAYOUT ROUND: one agent, warm-up, N decisions; fills $T/r.LAYOUT.ROUND
# with "agent_user agent_sys redis_user redis_sys client_user client_sys sirq" ticks.
run() {
	local layout=$1 r=$2 listen addr redis a0 r0 s0 a1 r1 s1 cpid c1
	case $layout in
	tcp)   listen=127.0.0.1:$(free_port); redis=redis://127.0.0.1:$REDIS_PORT/0 ;;
	unix1) listen=unix:$T/agent.sock;      redis=redis://127.0.0.1:$REDIS_PORT/0 ;;
	unix)  listen=unix:$T/agent.sock;      redis=unix://$T/redis.sock ;;
	esac
	addr=$listen
	cat >"$T/agent.$layout.conf" <<-CONF
	listen $listen
	redis $redis
	redis-timeout 1s
	threads 1
	log-level warn
	policy transfer 1000000/1s
	redis-engine $ENGINE
	$(legacy_keys_off)
	CONF
	"$AGENT" -f "$T/agent.$layout.conf" >>"$T/agent.$layout.log" 2>&1 &
	local apid=$!
	t_track "$apid"
	for _ in $(seq 200); do
		"$BENCH" -a "$addr" -c 1 -d 1 -n 1 -k 1 -p transfer -q 2>/dev/null && break
		sleep 0.05
	done
	"$BENCH" -a "$addr" -c "$C" -d "$D" -n 20000 -k 10000 -p transfer --strict -q \
		|| die "$layout: warm-up failed ($T/agent.$layout.log)"
	redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
	a0=$(ticks "$apid"); r0=$(ticks "$REDIS_PID"); s0=$(sirq)
	"$BENCH" -a "$addr" -c "$C" -d "$D" -n "$N" -k 10000 -p transfer --strict -q &
	cpid=$!
	# the client's ticks just before it exits: read them from its exit
	# status file is not possible, so sample until it is gone
	c1="0 0"
	while kill -0 "$cpid" 2>/dev/null; do
		c1=$(ticks "$cpid" 2>/dev/null || echo "$c1")
		sleep 0.02
	done
	wait "$cpid" || die "$layout: spoa-bench failed (errors in the answers?)"
	a1=$(ticks "$apid"); r1=$(ticks "$REDIS_PID"); s1=$(sirq)
	kill -TERM "$apid"; wait_gone "$apid" 10 || kill -KILL "$apid"
	wait "$apid" 2>/dev/null
	echo "$a0 $a1 $r0 $r1 $c1 $s0 $s1" | awk '{ print $3 - $1, $4 - $2, $7 - $5, $8 - $6, $9, $10, $12 - $11 }' \
		>"$T/r.$layout.$r"
}

LAYOUTS="tcp unix1 unix"
for r in $(seq "$ROUNDS"); do
	for l in $LAYOUTS; do run "$l" "$r"; done
done

# per decision (µs), the median round by the total of every column
printf '%-7s %-10s %12s %12s %14s %12s %10s %10s\n' layout "agent" "agent sys" "redis" "client" "client sys" softirq total
printf '%-7s %-10s %12s %12s %14s %12s %10s %10s\n' "" "µs/dec" "µs/dec" "µs/dec" "µs/dec" "µs/dec" "µs/dec" "µs/dec"
for l in $LAYOUTS; do
	for r in $(seq "$ROUNDS"); do
		awk -v n="$N" -v hz="$HZ" -v r="$r" '{ f = 1e6 / hz / n
			printf "%.3f %.3f %.3f %.3f %.3f %.3f %.3f %d\n", ($1 + $2) * f, $2 * f, ($3 + $4) * f,
				($5 + $6) * f, $6 * f, $7 * f, ($1 + $2 + $3 + $4 + $5 + $6 + $7) * f, r }' "$T/r.$l.$r"
	done | sort -g -k7 >"$T/s.$l"
	m=$(awk -v k=$(( (ROUNDS + 1) / 2 )) 'NR == k' "$T/s.$l")
	read -r ag ags rd cl cls sq tot _ <<<"$m"
	spread=$(awk '{ printf "%s%.2f", (NR > 1 ? "/" : ""), $7 }' "$T/s.$l")
	printf '%-7s %-10.2f %12.2f %12.2f %14.2f %12.2f %10.2f %10.2f  (totals by round: %s)\n' \
		"$l" "$ag" "$ags" "$rd" "$cl" "$cls" "$sq" "$tot" "$spread"
	if [ -n "$TSV" ]; then
		printf 'legs_%s_%s_us\t%s\n' "$l" agent "$ag" "$l" agent_sys "$ags" "$l" redis "$rd" "$l" client "$cl" \
			"$l" client_sys "$cls" "$l" sirq "$sq" "$l" total "$tot" >>"$TSV"
		printf 'legs_%s_rounds\t%s\n' "$l" "$spread" >>"$TSV"
	fi
done
[ -z "$TSV" ] || printf 'legs_n\t%s\nlegs_shape\t%s\nlegs_engine\t%s\n' "$N" "$SHAPE" "$ENGINE" >>"$TSV"
