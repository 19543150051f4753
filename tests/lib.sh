#!/usr/bin/env bash
# The shell helpers, for the integration, end-to-end and chaos tests and for
# tools/demo.sh and tools/bench.sh: real processes on loopback, ephemeral
# ports, one temp dir per test, cleanup on exit.
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
BENCH=${BENCH:-$ROOT/bench/spoa-bench}
# The HAProxy binary the tests run (Debian's 2.6 unless told, e.g. the 3.2
# that tools/haproxy-build.sh provides: HAPROXY=build/haproxy-3.2/haproxy).
HAPROXY=${HAPROXY:-haproxy}
# The HAProxy files the edge runs (haproxy.cfg, backend.cfg, the SPOE file,
# maps, errors/): the tree's unless told, e.g. a package's installed copies
# (tools/deb-test.sh: HAPROXY_FILES=/usr/share/ratelimit-spoa/haproxy).
HAPROXY_FILES=${HAPROXY_FILES:-$ROOT/haproxy}
SPOP_CLIENT="python3 $ROOT/tests/spop.py"
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

# port_free PORT: nothing listens on 127.0.0.1:PORT and we may bind it.
port_free() {
	python3 -c 'import socket,sys; s=socket.socket(); s.bind(("127.0.0.1",int(sys.argv[1]))); s.close()' "$1" 2>/dev/null
}

# pick_port DEFAULT: DEFAULT if free, else a port the kernel picks (the
# demo's fixed ports, when nothing else holds them).
pick_port() {
	if port_free "$1"; then echo "$1"; else free_port; fi
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

# counted_keys: how many keys hold counted units (windows, pools, buckets).
# The agent's own bookkeeping under ratelimit-spoa:{ctl}: (the minute's
# denial counts, written by any worker's flush at any moment) is left out,
# so a "nothing counted" check does not race that flush.
counted_keys() { rcli --scan | grep -vc '^ratelimit-spoa:{ctl}:' || true; }

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

# "legacy-keys off" when $AGENT takes it (1.1.0 on; an older binary being
# compared: nothing): the bench tools measure the steady state, without the
# hour after a start in which a one-window decision also counts 1.0.0's key.
legacy_keys_off() {
	printf 'policy transfer 3/1s\nlegacy-keys off\n' >"$T/legacy-probe.conf"
	"$AGENT" -c -f "$T/legacy-probe.conf" >/dev/null 2>&1 && echo 'legacy-keys off'
	return 0
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

# --- Edge helpers (end-to-end tests): HAProxy, demo backends, tokens ---------
#   jwt_setup                    # RS256 key pair in $T/jwt, exports RL_JWT_PUBKEY
#   mint_token SUB [opts]        # a token for SUB (tools/jwt.sh mint options)
#   start_backend                # haproxy/backend.cfg; TRANSFERS_PORT, ACCOUNTS_PORT
#   start_haproxy NAME [CFG [ARG...]]  # the edge (haproxy/haproxy.cfg), ARGs to haproxy
#                                # (e.g. -W); HAP_PORT_<NAME>, HAP_PID_<NAME>
#                                # (E2E_AGENT_ADDR: the agent's address, e.g. unix@/path)
#   reload_haproxy NAME          # seamless reload: -x <stats socket> -sf <old pid>
#   stop_haproxy NAME
#   edge_policies                # the agent policies haproxy.cfg names
#   start_edge [A B ...]         # the whole stack: keys, redis, agent (edge policies),
#                                # backend, and the named HAProxy instances (default A B)
#   req NAME METHOD PATH [TOKEN] [curl args]   # RSP_STATUS, rsp_hdr H, $T/rsp.body

jwt_setup() {
	"$ROOT/tools/jwt.sh" keygen "$T/jwt" >/dev/null || return 1
	export RL_JWT_PUBKEY=$T/jwt/jwt-public.pem
}

mint_token() {
	local sub=$1; shift
	"$ROOT/tools/jwt.sh" mint --key "$T/jwt/jwt-private.pem" --sub "$sub" "$@"
}

# site_head [STATS-SOCKET]: the global and defaults sections of a site's own
# haproxy.cfg as public API gateways write them (log to stdout, option
# httplog, forwardfor, dontlog-normal): what a merged edge lives beside.
site_head() {
	echo global
	echo "    log stdout format raw local0 info"
	[ -n "${1:-}" ] && echo "    stats socket \"$1\" mode 600 level admin"
	printf '%s\n' "" defaults "    mode http" "    log global" "    option httplog" "    option forwardfor" \
		"    option dontlog-normal" "    timeout connect 5s" "    timeout client  30s" "    timeout server  30s"
}

# The policy lines of the shipped config (the one policies file, which
# haproxy/routes.map names).
edge_policies() { grep -E '^(policy|override)[[:space:]]' "$ROOT/etc/ratelimit-spoa.conf"; }

# Decision budgets for a shared, loaded machine: the tests check outcomes,
# never latency, so a slow Redis call must not turn into a 503 here. The
# agent's redis-timeout (a config line for start_agent) stays below the SPOE
# "timeout processing" that start_haproxy gives HAProxy.
E2E_REDIS_TIMEOUT="redis-timeout 1s"

start_edge() {
	local names=("$@") n
	[ $# -gt 0 ] || names=(A B)
	jwt_setup || return 1
	start_redis || return 1
	start_agent "$E2E_REDIS_TIMEOUT
$(edge_policies)" || return 1
	start_backend || return 1
	for n in "${names[@]}"; do start_haproxy "$n" || return 1; done
}

start_backend() {
	TRANSFERS_PORT=$(free_port)
	ACCOUNTS_PORT=$(free_port)
	RL_LOG=stdout RL_TRANSFERS_BIND=127.0.0.1:$TRANSFERS_PORT RL_ACCOUNTS_BIND=127.0.0.1:$ACCOUNTS_PORT \
		"$HAPROXY" -db -f "$HAPROXY_FILES/backend.cfg" >>"$T/backend.log" 2>&1 &
	BACKEND_PID=$!
	t_track "$BACKEND_PID"
	wait_port "$TRANSFERS_PORT" && wait_port "$ACCOUNTS_PORT" || { echo "backend did not start"; return 1; }
}

# _hap_exec NAME CFG [haproxy args]: run haproxy in the background with the
# edge environment of instance NAME (kept in $T so a reload sees the same).
_hap_exec() {
	local name=$1 cfg=$2; shift 2
	(
		# shellcheck disable=SC1090
		. "$T/haproxy-$name.env"
		exec "$HAPROXY" -db -f "$cfg" "$@"
	) >>"$T/haproxy-$name.log" 2>&1 &
	_HAP_NEW_PID=$!
	t_track "$_HAP_NEW_PID"
}

start_haproxy() {
	local name=$1 cfg=${2:-$HAPROXY_FILES/haproxy.cfg} port
	shift $(( $# < 2 ? $# : 2 ))
	port=$(free_port)
	cat > "$T/haproxy-$name.env" <<-ENV
	export RL_BIND=127.0.0.1:$port RL_INSTANCE=$name RL_LOG=stdout
	export RL_AGENT_ADDR=${E2E_AGENT_ADDR:-127.0.0.1:${AGENT_PORT:-12345}}
	export RL_TRANSFERS_ADDR=127.0.0.1:${TRANSFERS_PORT:-8091} RL_ACCOUNTS_ADDR=127.0.0.1:${ACCOUNTS_PORT:-8092}
	export RL_HAPROXY_DIR=$HAPROXY_FILES RL_JWT_PUBKEY=${RL_JWT_PUBKEY:-$T/jwt/jwt-public.pem}
	export RL_ADMIN_SOCK=$T/haproxy-$name.sock RL_SPOE_TIMEOUT=${RL_SPOE_TIMEOUT:-2s}
	export RL_APIKEYS_MAP=${RL_APIKEYS_MAP:-$HAPROXY_FILES/apikeys.map}
	ENV
	# optional: ES256 tokens, a mutual-TLS listener, keys by kid, iss/aud,
	# leeway (see haproxy/haproxy.cfg)
	local v
	for v in RL_JWT_ES256_PUBKEY RL_TLS_BIND RL_TLS_CERT RL_TLS_CA RL_JWT_ISSUER RL_JWT_AUDIENCE \
		RL_JWT_LEEWAY RL_JWT_KEY{1..4} RL_JWT_KID{1..4} RL_JWT_ALG{1..4} RL_TRUSTED_PROXIES RL_IPV6_PREFIX RL_JWKS_MAP RL_DRAIN_LUA RL_DRAIN_MAX \
		RL_PLAN_CLAIM RL_CERT_PLANS_MAP RL_IETF_ONLY; do
		[ -n "${!v:-}" ] && echo "export $v=${!v}" >> "$T/haproxy-$name.env"
	done
	echo "$cfg" > "$T/haproxy-$name.cfgpath"
	_hap_exec "$name" "$cfg" "$@"
	printf -v "HAP_PID_$name" '%s' "$_HAP_NEW_PID"
	printf -v "HAP_PORT_$name" '%s' "$port"
	wait_port "$port" || { echo "haproxy $name did not start"; tail "$T/haproxy-$name.log"; return 1; }
}

# reload_haproxy NAME: start a new process on the same config, taking the
# listening sockets over the stats socket, and tell the old one to finish.
reload_haproxy() {
	local name=$1 old new_var="HAP_PID_$1"
	old=${!new_var}
	_hap_exec "$name" "$(cat "$T/haproxy-$name.cfgpath")" -x "$T/haproxy-$name.sock" -sf "$old"
	printf -v "HAP_PID_$name" '%s' "$_HAP_NEW_PID"
	HAP_OLD_PID=$old
}

# hap_workers MASTER: the PIDs of the workers of master-worker HAProxy MASTER.
# (cat, not awk on the files: mawk stops at a process that exited meanwhile)
hap_workers() { cat /proc/[0-9]*/stat 2>/dev/null | awk -v m="$1" '$4 == m { print $1 }'; }

# wait_new_worker MASTER OLD: until MASTER has a worker and OLD is not one of
# them (a reload done; 20 s at most).
wait_new_worker() {
	local w
	for _ in $(seq 200); do
		w=$(hap_workers "$1")
		[ -n "$w" ] && ! grep -qx "$2" <<<"$w" && return 0
		sleep 0.1
	done
	return 1
}

# load_start METHOD URL TOKEN: three client loops, a new connection per
# request as independent clients would (several decisions in flight); line
# "<status> <RateLimit-Limit>" per response in $T/loop.out. Bounded: 3000
# requests a loop, or load_stop.
load_start() {
	LOAD_PIDS=()
	for _ in 1 2 3; do
		(
			for _ in $(seq 3000); do
				[ -e "$T/stop" ] && break
				curl -s -m 10 -o /dev/null -X "$1" -H "Authorization: Bearer $3" \
					-w '%{http_code} %header{ratelimit-limit}\n' "$2"
			done
		) >> "$T/loop.out" 2>&1 &
		LOAD_PIDS+=($!)
	done
}
# load_wait N: until $T/loop.out has N lines (30 s at most; counted, not timed).
load_wait() { for _ in $(seq 600); do [ "$(wc -l < "$T/loop.out")" -ge "$1" ] && return 0; sleep 0.05; done; return 1; }
load_stop() { touch "$T/stop"; wait "${LOAD_PIDS[@]}"; }

stop_haproxy() {
	local v="HAP_PID_$1"
	kill -TERM "${!v}" 2>/dev/null
	wait_gone "${!v}"
}

# req NAME METHOD PATH [TOKEN] [curl args...]: one request to edge instance
# NAME. RSP_STATUS is the HTTP status (000 if none); rsp_hdr reads headers.
req() {
	local name=$1 method=$2 path=$3 token=${4:-} pv="HAP_PORT_$1"
	shift 3; [ $# -gt 0 ] && shift
	local auth=()
	[ -n "$token" ] && auth=(-H "Authorization: Bearer $token")
	RSP_STATUS=$(curl -s -m 10 -X "$method" "${auth[@]}" "$@" -D "$T/rsp.hdr" -o "$T/rsp.body" \
		-w '%{http_code}' "http://127.0.0.1:${!pv}$path")
}

# rsp_hdr NAME: the value of header NAME in the last req response, "" if absent.
rsp_hdr() {
	awk -v h="$(echo "$1" | tr 'A-Z' 'a-z')" -F': ' \
		'{ k = tolower($1); sub(/\r$/, ""); if (k == h) { sub(/^[^:]*: /, ""); print; exit } }' "$T/rsp.hdr"
}

# req_seq METHOD TOKEN NAME PATH [NAME PATH...]: the requests one after the
# other from a single curl process (one burst, no per-request fork), so a
# sequence meant to fit in a short window does. Line i of $T/seq.out is
# "<status> <headers as JSON, lowercase names>", the body is $T/seq.body.<i>.
req_seq() {
	local method=$1 token=$2 i=0 pv args=()
	shift 2
	while [ $# -ge 2 ]; do
		i=$((i + 1)); pv="HAP_PORT_$1"
		args+=(-o "$T/seq.body.$i" "http://127.0.0.1:${!pv}$2")
		shift 2
	done
	curl -s -m 30 -X "$method" -H "Authorization: Bearer $token" \
		-w '{"s":"%{http_code}","h":%{header_json}}\n' "${args[@]}" \
		| jq -r '"\(.s) \(.h | with_entries(.value |= .[0]) | tojson)"' > "$T/seq.out"
}

# seq_hdr I NAME: header NAME (any case) of response I of the last req_seq.
seq_hdr() { sed -n "$1p" "$T/seq.out" | cut -d' ' -f2- | jq -r --arg h "${2,,}" '.[$h] // ""'; }
seq_status() { sed -n "$1p" "$T/seq.out" | cut -d' ' -f1; }
