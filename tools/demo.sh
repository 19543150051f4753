#!/usr/bin/env bash
# demo.sh - the two-HAProxy story on loopback, no Docker.
#
#   tools/demo.sh story   start everything in a temp dir, run the story, tear
#                         down; exit 0 only if the story held (a smoke test)
#   tools/demo.sh up      start the stack and leave it running; prints the URLs
#                         and a token to try it with curl
#   tools/demo.sh down    stop what "up" started (by the PIDs it recorded)
#
# Stack: redis-server, ratelimit-spoa, a backend HAProxy (canned JSON for
# /transfers and /accounts), edge HAProxy A and B (haproxy/haproxy.cfg).
# Default ports 16379, 12345, 8091/8092, 8081/8082; any that is taken is
# replaced by a free one. `make demo` / `make up` build the agent first.
set -euo pipefail
# The shell helpers the tests use (free_port, port_free, pick_port,
# wait_port); it sets ROOT and AGENT.
# shellcheck source=../tests/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tests/lib.sh"
set -euo pipefail
UP_DIR=${RL_DEMO_DIR:-${TMPDIR:-/tmp}/ratelimit-spoa-demo.$(id -u)}
ACCOUNT=ACC-1001
KEEP=0   # story: keep the temp dir (logs) when something failed

if [ -t 1 ]; then B=$'\e[1m'; G=$'\e[32m'; R=$'\e[31m'; Y=$'\e[33m'; N=$'\e[0m'; else B='' G='' R='' Y='' N=''; fi
say()  { printf '%s\n' "$*"; }
step() { printf '\n%s==> %s%s\n' "$B" "$*" "$N"; }
die()  { KEEP=1; printf '%sdemo: %s%s\n' "$R" "$*" "$N" >&2; exit 1; }

# spawn NAME BIN CMD...: start CMD detached in its own session (so it
# outlives "make up"), log to $S/NAME.log, record "PID NAME BIN" in $S/pids.
# BIN is the program CMD ends up running, checked again before any kill.
spawn() {
	local name=$1 bin=$2; shift 2
	setsid "$@" >>"$S/$name.log" 2>&1 </dev/null &
	echo "$! $name $bin" >> "$S/pids"
	eval "PID_${name//-/_}=$!"
}

# ours PID BIN: PID still runs BIN as the leader of the session we gave it
# (a recycled PID fails at least one of the two).
ours() {
	local pid=$1 bin=$2 sid argv
	# Field 6 of /proc/PID/stat is the session id; the command name before
	# it is in parentheses and may hold spaces, so cut after the last ')'.
	sid=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f4) || return 1
	[ "$sid" = "$pid" ] || return 1
	argv=$(tr '\0' '\n' 2>/dev/null < "/proc/$pid/cmdline" | head -2 | xargs -n1 basename 2>/dev/null)
	grep -qxF "$bin" <<<"$argv"
}

# stop_all DIR: TERM every recorded process that is still ours, newest first.
stop_all() {
	local dir=$1 pid name bin i
	[ -f "$dir/pids" ] || return 0
	tac "$dir/pids" | while read -r pid name bin; do
		ours "$pid" "$bin" || continue
		kill -TERM "$pid" 2>/dev/null || continue
		for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -f "$dir/pids"
}

# start_stack: everything, in $S. Sets the *_PORT variables and writes $S/env.
start_stack() {
	[ -x "$AGENT" ] || die "$AGENT is not built: run 'make demo' (it builds it)"
	local c
	for c in redis-server haproxy curl openssl jq python3 setsid; do
		command -v "$c" >/dev/null || die "$c is missing: run 'make deps'"
	done
	REDIS_PORT=$(pick_port 16379); AGENT_PORT=$(pick_port 12345)
	TRANSFERS_PORT=$(pick_port 8091); ACCOUNTS_PORT=$(pick_port 8092)
	A_PORT=$(pick_port 8081); B_PORT=$(pick_port 8082)

	"$ROOT/tools/jwt.sh" keygen "$S" >/dev/null

	# The module (make module) when built: RATELIMIT.DECIDE, which agents
	# on redis-engine auto use instead of the script.
	local load=()
	[ -e "$ROOT/module/ratelimit.so" ] && load=(--loadmodule "$ROOT/module/ratelimit.so")
	spawn redis redis-server redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$S" --daemonize no "${load[@]}"
	wait_port "$REDIS_PORT" || die "redis-server did not start (see $S/redis.log)"

	{
		echo "listen 127.0.0.1:$AGENT_PORT"
		echo "redis redis://127.0.0.1:$REDIS_PORT/0"
		# Above the 50ms default: a demo on a busy laptop should show the
		# story, not a Redis call that took 60ms.
		echo "redis-timeout 200ms"
		edge_policies   # the policies of the shipped config, which routes.map names
	} > "$S/agent.conf"
	spawn agent "$(basename "$AGENT")" "$AGENT" -f "$S/agent.conf"
	wait_port "$AGENT_PORT" || die "the agent did not start (see $S/agent.log)"

	spawn backend haproxy env RL_LOG=stdout RL_TRANSFERS_BIND="127.0.0.1:$TRANSFERS_PORT" \
		RL_ACCOUNTS_BIND="127.0.0.1:$ACCOUNTS_PORT" haproxy -db -f "$ROOT/haproxy/backend.cfg"

	local inst port
	for inst in A B; do
		port=$A_PORT; [ "$inst" = B ] && port=$B_PORT
		spawn "haproxy-$inst" haproxy env RL_BIND="127.0.0.1:$port" RL_INSTANCE="$inst" RL_LOG=stdout \
			RL_AGENT_ADDR="127.0.0.1:$AGENT_PORT" \
			RL_TRANSFERS_ADDR="127.0.0.1:$TRANSFERS_PORT" RL_ACCOUNTS_ADDR="127.0.0.1:$ACCOUNTS_PORT" \
			RL_JWT_PUBKEY="$S/jwt-public.pem" RL_HAPROXY_DIR="$ROOT/haproxy" \
			RL_ADMIN_SOCK="$S/haproxy-$inst.sock" \
			haproxy -db -f "$ROOT/haproxy/haproxy.cfg"
	done
	wait_port "$TRANSFERS_PORT" && wait_port "$ACCOUNTS_PORT" || die "backend did not start (see $S/backend.log)"
	wait_port "$A_PORT" || die "HAProxy A did not start (see $S/haproxy-A.log)"
	wait_port "$B_PORT" || die "HAProxy B did not start (see $S/haproxy-B.log)"

	cat > "$S/env" <<-EOF
	REDIS_PORT=$REDIS_PORT AGENT_PORT=$AGENT_PORT TRANSFERS_PORT=$TRANSFERS_PORT
	ACCOUNTS_PORT=$ACCOUNTS_PORT A_PORT=$A_PORT B_PORT=$B_PORT
	EOF
}

token() { "$ROOT/tools/jwt.sh" mint --key "$S/jwt-private.pem" --sub "$1" "${@:2}"; }

# ---------------------------------------------------------------------------
cmd_story() {
	S=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-spoa-story.XXXXXX")
	KEEP=0
	trap 'stop_all "$S"; if [ $KEEP = 1 ]; then echo "logs kept in $S"; else rm -rf "$S"; fi' EXIT
	trap 'exit 130' INT TERM
	local fails=0
	expect() { # expect WHAT OK?
		if [ "$2" = 1 ]; then say "  ${G}✔${N} $1"; else say "  ${R}✘ $1${N}"; fails=$((fails + 1)); fi
	}

	step "Starting redis-server, ratelimit-spoa, the transfers backend and HAProxy A + B on loopback"
	start_stack
	say "  HAProxy A  http://127.0.0.1:$A_PORT      HAProxy B  http://127.0.0.1:$B_PORT"
	say "  agent      127.0.0.1:$AGENT_PORT        redis      127.0.0.1:$REDIS_PORT"
	say "  policy transfer: 3 transfers per second per account, counted in Redis for both instances"
	# Which engine the agent chose at connect (redis-engine auto: the
	# module when Redis has it), from its redis_connected line.
	local engine="" i
	for i in $(seq 40); do
		engine=$(grep -o 'event=redis_connected .*engine=[a-z]*' "$S/agent.log" 2>/dev/null |
			grep -o 'engine=[a-z]*' | head -n 1)
		[ -n "$engine" ] && break
		sleep 0.05
	done
	case $engine in
	engine=module) say "  engine     the Redis module decides (RATELIMIT.DECIDE, module/ratelimit.so)" ;;
	engine=script) say "  engine     the Lua script decides (lua/sliding_window.lua; make module for the native one)" ;;
	*) say "  engine     not known yet (the agent has not logged redis_connected)" ;;
	esac

	local tok
	tok=$(token "$ACCOUNT")
	step "$ACCOUNT sends 6 transfers, alternating instances (POST /transfers)"
	local urls=() i
	for i in 1 2 3 4 5 6; do
		if [ $((i % 2)) = 1 ]; then urls+=(-o /dev/null "http://127.0.0.1:$A_PORT/transfers")
		else urls+=(-o /dev/null "http://127.0.0.1:$B_PORT/transfers"); fi
	done
	# One curl process: the 6 requests go out back to back, inside the window.
	curl -s -m 20 -X POST -H "Authorization: Bearer $tok" \
		-w '{"s":"%{http_code}","h":%{header_json}}\n' "${urls[@]}" \
		| jq -r '[.s, (.h["x-served-by"][0] // "?"), (.h["ratelimit-limit"][0] // "-"),
			(.h["ratelimit-remaining"][0] // "-"), (.h["ratelimit-reset"][0] // "-"),
			(.h["retry-after"][0] // "-")] | @tsv' > "$S/story.tsv"

	printf '\n  %s%-3s %-9s %-7s %-16s %-20s %-16s %-11s%s\n' "$B" "#" instance status \
		RateLimit-Limit RateLimit-Remaining RateLimit-Reset Retry-After "$N"
	local n=0 st inst lim rem rst ra col ok2=0 deny=0 maxra=1
	while IFS=$'\t' read -r st inst lim rem rst ra; do
		n=$((n + 1))
		case $st in 2*) col=$G; ok2=$((ok2 + 1)) ;; 429) col=$Y; deny=$((deny + 1)) ;; *) col=$R ;; esac
		[ "$ra" != - ] && [ "$ra" -gt "$maxra" ] && maxra=$ra
		printf '  %-3s %-9s %s%-7s%s %-16s %-20s %-16s %-11s\n' "$n" "$inst" "$col" "$st" "$N" "$lim" "$rem" "$rst" "$ra"
	done < "$S/story.tsv"
	say ""
	expect "the first 3 pass (2xx): $ok2 of 6" "$([ "$(cut -f1 "$S/story.tsv" | head -3 | grep -c '^2')" = 3 ] && echo 1)"
	expect "the next 3 get 429 with Retry-After: $deny of 6" \
		"$([ "$(cut -f1,6 "$S/story.tsv" | tail -3 | grep -cP '^429\t[1-9]')" = 3 ] && echo 1)"
	expect "the requests alternated A, B, A, B, A, B (one window for both)" \
		"$([ "$(cut -f2 "$S/story.tsv" | xargs)" = "A B A B A B" ] && echo 1)"

	step "Waiting ${maxra}s (the Retry-After), then one more transfer"
	sleep "$maxra"
	local code='' h=''
	for i in $(seq 20); do
		inst=A; [ $((i % 2)) = 0 ] && inst=B
		local port=$A_PORT; [ "$inst" = B ] && port=$B_PORT
		code=$(curl -s -m 10 -o /dev/null -D "$S/h" -w '%{http_code}' -X POST \
			-H "Authorization: Bearer $tok" "http://127.0.0.1:$port/transfers")
		[ "${code:0:1}" = 2 ] && break
		sleep 0.25
	done
	h=$(tr -d '\r' < "$S/h" | grep -i '^ratelimit-remaining:' | cut -d' ' -f2)
	say "  via $inst: ${G}$code${N}  RateLimit-Remaining: ${h:--}"
	expect "the old entries left the window: the transfer passes again" "$([ "${code:0:1}" = 2 ] && echo 1)"

	step "Stopping Redis, then one more transfer"
	kill -TERM "$PID_redis"
	for i in $(seq 50); do kill -0 "$PID_redis" 2>/dev/null || break; sleep 0.1; done
	code=$(curl -s -m 10 -o "$S/body" -w '%{http_code}' -X POST -H "Authorization: Bearer $tok" \
		"http://127.0.0.1:$A_PORT/transfers")
	say "  via A: ${R}$code${N}  $(cat "$S/body")"
	expect "Redis unreachable: 503, never a free pass (fail-closed)" "$([ "$code" = 503 ] && echo 1)"

	step "Tearing down"
	if [ $fails -gt 0 ]; then
		KEEP=1
		say "${R}The story did not hold ($fails check(s) failed).${N}"
		exit 1
	fi
	say "${G}The story held.${N} Try it yourself: make up (then make down)."
}

cmd_up() {
	S=$UP_DIR
	if [ -f "$S/pids" ]; then
		# shellcheck disable=SC1091
		. "$S/env" 2>/dev/null || true
		say "The demo stack is already up (state in $S); 'make down' stops it."
		print_try
		return 0
	fi
	mkdir -p "$S"
	trap 'stop_all "$S"' ERR
	start_stack
	trap - ERR
	say "${G}ratelimit-spoa demo stack is up${N} (state, keys and logs in $S)"
	print_try
}

print_try() {
	local tok
	tok=$(token "$ACCOUNT")
	cat <<-EOF

	  HAProxy A   http://127.0.0.1:$A_PORT
	  HAProxy B   http://127.0.0.1:$B_PORT
	  agent       127.0.0.1:$AGENT_PORT   (config $S/agent.conf)
	  redis       127.0.0.1:$REDIS_PORT  (redis-cli -p $REDIS_PORT zrange transfer:limit:v1:jwt:$ACCOUNT 0 -1 withscores)
	  backends    127.0.0.1:$TRANSFERS_PORT (transfers), 127.0.0.1:$ACCOUNTS_PORT (accounts)
	  logs        $S/*.log

	A token for $ACCOUNT (RS256, valid one hour):

	  export TOKEN=$tok

	  curl -i -X POST -H "Authorization: Bearer \$TOKEN" http://127.0.0.1:$A_PORT/transfers
	  curl -i -X POST -H "Authorization: Bearer \$TOKEN" http://127.0.0.1:$B_PORT/transfers
	  curl -i -H "Authorization: Bearer \$TOKEN" http://127.0.0.1:$A_PORT/accounts/$ACCOUNT
	  curl -i -X POST -H "Authorization: Bearer \$TOKEN" http://127.0.0.1:$A_PORT/exports   # two windows: 2/1s, 5/1h

	Routes and their policies: haproxy/routes.map; the policies: etc/ratelimit-spoa.conf.

	Another account:  tools/jwt.sh mint --key $S/jwt-private.pem --sub ACC-2002
	Stop everything:  make down
	EOF
}

cmd_down() {
	S=$UP_DIR
	if [ ! -f "$S/pids" ]; then
		say "No demo stack recorded in $S (nothing to stop)."
		return 0
	fi
	stop_all "$S"
	rm -rf "$S"
	say "Demo stack stopped."
}

case ${1:-} in
story) cmd_story ;;
up) cmd_up ;;
down) cmd_down ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
