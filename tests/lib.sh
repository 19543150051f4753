#!/usr/bin/env bash
# Shared harness for integration and end-to-end tests: real processes on
# loopback, ephemeral ports, one temp dir per test, cleanup on exit.
#
#   . tests/lib.sh
#   t_setup                      # creates $T (temp dir), traps cleanup
#   start_redis                  # sets REDIS_PORT, REDIS_PID
#   start_agent <cfg-text>       # sets AGENT_PORT, AGENT_PID (cfg gets listen/redis)
#   start_haproxy NAME CFG       # sets HAP_PID_<NAME>
#   ok "what" / fail "what"      # record an assertion
#   t_done                       # prints the tally, exit status
#
# Only processes this file started are stopped, by PID.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
AGENT=${AGENT:-$ROOT/spoa/ratelimit-spoa}
BENCH=${BENCH:-$ROOT/spoa/spoa-bench}
SPOP_CLIENT="python3 $ROOT/tests/spop_client.py"
T_PASS=0
T_FAIL=0
T_PIDS=()

t_setup() {
	T=$(mktemp -d "${TMPDIR:-/tmp}/rlspoa.XXXXXX")
	trap t_cleanup EXIT
	trap 'exit 130' INT TERM
}

t_cleanup() {
	local pid
	for pid in "${T_PIDS[@]}"; do
		kill -CONT "$pid" 2>/dev/null
		kill -TERM "$pid" 2>/dev/null
	done
	for pid in "${T_PIDS[@]}"; do
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null
	done
	if [ "${T_KEEP:-0}" = 1 ] || [ "$T_FAIL" -gt 0 ]; then
		echo "# logs kept in $T"
		for f in "$T"/*.log; do [ -f "$f" ] && { echo "# --- $f (tail)"; tail -n 30 "$f" | sed 's/^/#   /'; }; done
	else
		rm -rf "$T"
	fi
}

t_track() { T_PIDS+=("$1"); }

# A free TCP port on 127.0.0.1 (bound then released by the kernel's choice).
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_port PORT [SECONDS]: until something accepts on 127.0.0.1:PORT.
wait_port() {
	local port=$1 secs=${2:-10} i
	for i in $(seq $((secs * 20))); do
		(exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && return 0
		sleep 0.05
	done
	return 1
}

# wait_gone PID [SECONDS]
wait_gone() {
	local pid=$1 secs=${2:-10} i
	for i in $(seq $((secs * 20))); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.05
	done
	return 1
}

start_redis() {
	REDIS_PORT=${1:-$(free_port)}
	redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$T" --logfile "$T/redis-$REDIS_PORT.log" --daemonize no &
	REDIS_PID=$!
	t_track "$REDIS_PID"
	wait_port "$REDIS_PORT" || { echo "redis did not start"; return 1; }
}

stop_redis() {
	kill -TERM "$REDIS_PID" 2>/dev/null
	wait_gone "$REDIS_PID"
}

rcli() { redis-cli -p "$REDIS_PORT" "$@"; }

# start_agent "<extra config lines>" [agent flags...]
# Writes $T/agent.conf with listen/redis filled in and starts the agent.
start_agent() {
	local extra=$1; shift
	AGENT_PORT=${AGENT_PORT:-$(free_port)}
	{
		echo "listen 127.0.0.1:$AGENT_PORT"
		echo "redis redis://127.0.0.1:${REDIS_PORT:-6379}/0"
		printf '%s\n' "$extra"
	} > "$T/agent.conf"
	"$AGENT" -f "$T/agent.conf" "$@" >>"$T/agent.log" 2>&1 &
	AGENT_PID=$!
	t_track "$AGENT_PID"
	wait_port "$AGENT_PORT" || { echo "agent did not start"; cat "$T/agent.log"; return 1; }
}

stop_agent() {
	kill -TERM "$AGENT_PID" 2>/dev/null
	wait_gone "$AGENT_PID"
}

ok()   { T_PASS=$((T_PASS + 1)); echo "ok - $*"; }
fail() { T_FAIL=$((T_FAIL + 1)); echo "not ok - $*"; }

# check "what" test-args...: ok if `test args` holds.
check() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what (got: $*)"; fi; }

# eq "what" expected actual
eq() { if [ "$2" = "$3" ]; then ok "$1"; else fail "$1: expected '$2', got '$3'"; fi; }

t_done() {
	echo "# $(basename "$0"): $T_PASS passed, $T_FAIL failed"
	[ "$T_FAIL" -eq 0 ]
}
