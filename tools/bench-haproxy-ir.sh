#!/usr/bin/env bash
# bench-haproxy-ir.sh - HAProxy's own instructions per request, counted by
# callgrind: make bench's no-JWT edge (haproxy/haproxy.cfg, identity from an
# X-Bench-Account header, tools/edge-nojwt.sh) answering by itself
# (tools/edge-alone.sh) or asking an agent over SPOE: bench/spoa-floor (fixed
# answers, no I/O), the floor with -s (status only), or the real agent on the
# module engine (a redis-server with module/ratelimit.so). What SPOE costs
# HAProxy is a case's count minus "alone"'s; a knob's saving is one case
# against another with the same agent.
#
#   HAPROXY=build/haproxy-3.2/haproxy tools/bench-haproxy-ir.sh [CASE...]
#
# CASE is AGENT[+KNOB...], AGENT one of alone, floor, floor-s, module, lease
# (the module's agent with an inflight= policy: every admission holds a
# lease, so every response sends ratelimit-done; lease against module is
# what that message costs HAProxy per request), KNOB an
# edit of the SPOE file (spoe-ratelimit.conf) or of the agent's backend, in a
# copy of haproxy/ (the tree is never changed):
#   noproctime   no "option set-process-time"
#   noregister   no "register-var-names"
#   noonerror    no "option set-on-error"
#   nolog        no "log global" / "option dontlog-normal" in the spoe-agent
#   notimeouts   no "timeout hello" / "timeout idle" (2.6 only uses them)
#   nopipe       "no option pipelining"
#   args1        the message with one argument (key) instead of three
#   mfsN         "max-frame-size N"
#   mwfN         "max-waiting-frames N" (2.6; 3.x ignores it)
#   maxconnN     "maxconn N" on the agent's server line (agent connections)
#   acl503       the 503 rule testing the status first (two ACLs where an
#                allowed request now runs four; the same answers)
#   nodone       no response-phase ratelimit-done line (what a policy without
#                inflight= pays for it: its condition on every response)
#   ietf         the lean answer (RL_IETF_ONLY): the IETF RateLimit-Policy /
#                RateLimit fields only, the agent asked for the variables
#                they and the edge's rules read (vars=str(ietf))
#   nohdrs       no RateLimit-* header rules (measures what the variables'
#                use costs, apart from setting them; not a deployable edge)
# Default cases: alone floor floor-s module.
#
# Why instructions: counted instructions do not drift with the load of a
# shared box; CPU time does. How: HAProxy (-db, "nbthread 1" added to its
# global section so that one thread does all the work and the count does not
# depend on how connections spread over threads; the agent's server line
# without "check", whose timer would add a count that depends on the run's
# length) under valgrind --tool=callgrind --instr-atstart=no; WARM requests
# to warm it up (connections to the backend and the agent, pools), then
# instrumentation on (callgrind_control -i on), N requests (a python
# keep-alive client, CONNS connections with one request each in flight:
# several NOTIFYs in flight per agent connection), instrumentation off, one
# dump (callgrind_control -d): its total / N. Every answer must be 201. Then
# the same HAProxy without valgrind and N requests under strace -c -f:
# syscalls per request. Counts repeat within about 1.5% (how many frames
# HAProxy finds per read and sends per write still depends on timing).
#
# Knobs: BENCH_HIR_N=3000, BENCH_HIR_WARM=500, BENCH_HIR_CONNS=32,
# BENCH_HIR_TOP=20 (inclusive functions listed per case with
# BENCH_HIR_DETAIL=1), BENCH_HIR_TSV=FILE (name<TAB>value lines:
# hir_<case> instructions, hir_sys_<case> syscalls per request),
# BENCH_HIR_STRACE=0 (no syscall column), T_KEEP=1 keeps the dumps.
# In the strace run the agent (or the floor) is traced too: its syscalls per
# request in the last column (hir_asys_<case> in the TSV), the calls by name
# with BENCH_HIR_DETAIL=1: what the agent pays per decision behind this
# HAProxy (3.x sends a NOTIFY per sendto, 2.6 batches them).
# About 20 s per case (the two valgrind-free parts included).
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=../tests/lib.sh
. tests/lib.sh
t_setup
for t in valgrind callgrind_control callgrind_annotate redis-server python3; do
	command -v "$t" >/dev/null || { echo "bench-haproxy-ir: $t not found (make deps)" >&2; exit 1; }
done
N=${BENCH_HIR_N:-3000}
WARM=${BENCH_HIR_WARM:-500}
CONNS=${BENCH_HIR_CONNS:-32}
TOP=${BENCH_HIR_TOP:-20}
TSV=${BENCH_HIR_TSV:-}
DETAIL=${BENCH_HIR_DETAIL:-0}
STRACE=
[ "${BENCH_HIR_STRACE:-1}" = 0 ] || STRACE=$(command -v strace)
FLOOR=${FLOOR:-$(dirname "$BENCH")/spoa-floor}
MODULE_SO=$PWD/module/ratelimit.so
CASES=("$@")
[ ${#CASES[@]} -gt 0 ] || CASES=(alone floor floor-s module)
FAILED=0
die() { echo "bench-haproxy-ir: $*" >&2; exit 1; }
[ -x "$FLOOR" ] || die "no $FLOOR (make)"

# The client: N requests over CONNS keep-alive connections, POST /transfers
# with accounts ACC-0..ACC-9999 in turn; exits 1 unless every answer is 201.
cat >"$T/client.py" <<-'PY'
	import selectors, socket, sys
	port, n, conns = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
	sel = selectors.DefaultSelector()
	sent = done = bad = 0
	def request(s):
	    global sent
	    s.sendall(b"POST /transfers HTTP/1.1\r\nHost: api\r\nX-Bench-Account: ACC-%d\r\n"
	              b"Content-Length: 0\r\n\r\n" % (sent % 10000))
	    sent += 1
	for _ in range(min(conns, n)):
	    s = socket.create_connection(("127.0.0.1", port))
	    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
	    sel.register(s, selectors.EVENT_READ, bytearray())
	    request(s)
	while done < n:
	    for key, _ in sel.select(30) or sys.exit("client: no answer in 30 s"):
	        s, buf = key.fileobj, key.data
	        chunk = s.recv(65536)
	        if not chunk:
	            sys.exit("client: connection closed after %d answers" % done)
	        buf += chunk
	        while True:
	            end = buf.find(b"\r\n\r\n")
	            if end < 0:
	                break
	            head = bytes(buf[:end]).lower()
	            clen = 0
	            for line in head.split(b"\r\n")[1:]:
	                if line.startswith(b"content-length:"):
	                    clen = int(line.split(b":")[1])
	            if len(buf) < end + 4 + clen:
	                break
	            if not head.startswith(b"http/1.1 201"):
	                bad += 1
	            del buf[:end + 4 + clen]
	            done += 1
	            if sent < n:
	                request(s)
	if bad:
	    sys.exit("client: %d of %d answers not 201" % (bad, n))
	PY
client() { python3 "$T/client.py" "$1" "$2" "$CONNS"; }

# The demo backend, never counted.
start_backend >/dev/null || die "backend did not start"

# agent_port AGENT: sets APORT, the agent's port, started on the first case
# that needs it (not in a subshell: the processes must stay tracked).
# shellcheck disable=SC2034  # read through ${!v}
FLOOR_PORT='' FLOOR_S_PORT='' MODULE_PORT='' LEASE_PORT=''
FLOOR_PID='' FLOOR_S_PID='' MODULE_PID='' LEASE_PID='' APID=''
agent_port() {
	case $1 in
	alone) APORT=1 APID= ;;
	floor|floor-s)
		local v=FLOOR_PORT opt=
		[ "$1" = floor-s ] && v=FLOOR_S_PORT opt=-s
		if [ -z "${!v}" ]; then
			printf -v "$v" '%s' "$(free_port)"
			# shellcheck disable=SC2086
			"$FLOOR" -a "127.0.0.1:${!v}" $opt >"$T/$1.log" 2>&1 &
			t_track $!
			printf -v "${v%PORT}PID" '%s' $!
			wait_port "${!v}" 10 || die "$1 did not start"
		fi
		APORT=${!v} v=${v%PORT}PID APID=${!v} ;;
	module|lease)
		local v=MODULE_PORT pol="policy transfer 1000000/1s"
		# lease: bounds no run reaches either, the leases given back by
		# each response's ratelimit-done
		[ "$1" = lease ] && v=LEASE_PORT pol="$pol inflight=1000000 lease=10m"
		if [ -z "${!v}" ]; then
			[ -e "$MODULE_SO" ] || die "no $MODULE_SO (make module)"
			if [ -z "${REDIS_PORT:-}" ]; then
				REDIS_PORT=$(free_port)
				redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
					--dir "$T" --logfile "$T/redis.log" --loadmodule "$MODULE_SO" >/dev/null 2>&1 &
				t_track $!
				wait_port "$REDIS_PORT" || die "redis did not start"
			fi
			# every decision allowed: a limit no run reaches
			AGENT_PORT=
			start_agent "redis-timeout 10s
threads 1
log-level warn
$pol
redis-engine module
$(legacy_keys_off)" >&2 || die "the agent did not start"
			printf -v "$v" '%s' "$AGENT_PORT"
			printf -v "${v%PORT}PID" '%s' "$AGENT_PID"
		fi
		APORT=${!v} v=${v%PORT}PID APID=${!v} ;;
	*) return 1 ;;
	esac
}

# edit_knob DIR KNOB: KNOB applied to DIR's spoe-ratelimit.conf / haproxy.cfg.
edit_knob() {
	local spoe=$1/spoe-ratelimit.conf cfg=$1/haproxy.cfg
	case $2 in
	noproctime) sed -i '/^[[:space:]]*option set-process-time/d' "$spoe" ;;
	noregister) sed -i '/^[[:space:]]*register-var-names/d' "$spoe" ;;
	noonerror) sed -i '/^[[:space:]]*option set-on-error/d' "$spoe" ;;
	nolog) sed -i -e '/^[[:space:]]*log global/d' -e '/^[[:space:]]*option dontlog-normal/d' "$spoe" ;;
	notimeouts) sed -i -e '/^[[:space:]]*timeout hello/d' -e '/^[[:space:]]*timeout idle/d' "$spoe" ;;
	nopipe) sed -i 's/^\([[:space:]]*\)option pipelining/\1no option pipelining/' "$spoe" ;;
	args1) sed -i 's/^\([[:space:]]*args\) .*/\1 key=var(txn.rl_key)/' "$spoe" ;;
	mfs[0-9]*) sed -i "s/^\([[:space:]]*\)use-backend /\1max-frame-size ${2#mfs}\n&/" "$spoe" ;;
	mwf[0-9]*) sed -i "s/^\([[:space:]]*\)use-backend /\1max-waiting-frames ${2#mwf}\n&/" "$spoe" ;;
	acl503) sed -i 's/if { var(txn.rl_action) -m str ask } !{ var(txn.rl.status) -m str allow deny } || { var(txn.rl.status) -m found } !{ var(txn.rl.status) -m str allow deny }$/if !{ var(txn.rl.status) -m str allow deny } { var(txn.rl_action) -m str ask } || !{ var(txn.rl.status) -m str allow deny } { var(txn.rl.status) -m found }/' "$cfg"
		grep -q 'if !{ var(txn.rl.status) -m str allow deny } { var(txn.rl_action)' "$cfg" ;;
	nohdrs) sed -i '/^[[:space:]]*http-after-response set-header RateLimit/d' "$cfg" ;;
	nodone) sed -i '/^[[:space:]]*http-response send-spoe-group ratelimit rl-done /d' "$cfg" ;;
	ietf) sed -i -e 's/^\.if defined(RL_IETF_ONLY)$/.if 1/' -e 's/^\.if !defined(RL_IETF_ONLY)$/.if 0/' "$spoe" "$cfg"
		grep -q '^\.if 1$' "$spoe" && grep -q '^\.if 0$' "$cfg" ;;
	maxconn[0-9]*) sed -i "s/^\([[:space:]]*server agent1 .*\)$/\1 maxconn ${2#maxconn}/" "$cfg" ;;
	*) return 1 ;;
	esac
}

# prepare CASE: $T/<case>/ (a copy of haproxy/ with the case's edits and
# edge.cfg, the config HAProxy runs); sets DIR and APORT.
prepare() {
	local c=$1 agent=${1%%+*} k
	DIR=$T/$c
	rm -rf "$DIR"
	cp -r haproxy "$DIR"
	agent_port "$agent" || { echo "bench-haproxy-ir: unknown agent in $c" >&2; return 1; }
	if [ "$c" != "$agent" ]; then
		local IFS=+
		for k in ${c#"$agent"+}; do
			edit_knob "$DIR" "$k" || { echo "bench-haproxy-ir: unknown knob $k in $c" >&2; return 1; }
		done
		unset IFS
	fi
	sed -i -e 's/^\([[:space:]]*server agent1 .*\) check inter 1s fall 2 rise 2/\1/' \
		-e 's/^global$/&\n    nbthread 1/' "$DIR/haproxy.cfg"
	if [ "$agent" = alone ]; then
		tools/edge-alone.sh "$DIR/haproxy.cfg" >"$DIR/alone.cfg" || return 1
		tools/edge-nojwt.sh "$DIR/alone.cfg" >"$DIR/edge.cfg" || return 1
	else
		tools/edge-nojwt.sh "$DIR/haproxy.cfg" >"$DIR/edge.cfg" || return 1
	fi
	grep -v '^[[:space:]]*#' "$DIR/edge.cfg" | grep -q jwt_verify && { echo "bench-haproxy-ir: JWT left in $c" >&2; return 1; }
	return 0
}

# run_edge CASE WRAP...: HAProxy on $DIR/edge.cfg under WRAP; sets EPORT, EPID.
# RL_SPOE_TIMEOUT 30s: under callgrind HAProxy runs tens of times slower, and
# the shipped 500ms would turn some decisions into 503s.
run_edge() {
	local c=$1; shift
	EPORT=$(free_port)
	env RL_BIND="127.0.0.1:$EPORT" RL_INSTANCE=ir RL_AGENT_ADDR="127.0.0.1:$APORT" \
		RL_TRANSFERS_ADDR="127.0.0.1:$TRANSFERS_PORT" RL_ACCOUNTS_ADDR="127.0.0.1:$ACCOUNTS_PORT" \
		RL_HAPROXY_DIR="$DIR" \
		RL_ADMIN_SOCK="$DIR/admin.sock" RL_LOG=stdout RL_SPOE_TIMEOUT=30s \
		"$@" "$HAPROXY" -db -f "$DIR/edge.cfg" >/dev/null 2>"$DIR/edge.log" &
	EPID=$!
	t_track "$EPID"
	wait_port "$EPORT" 120 || { tail -n 5 "$DIR/edge.log" >&2; return 1; }
}

# cg_total DUMP OUT: the dump's total instructions; OUT gets its inclusive
# profile (callgrind_annotate).
cg_total() {
	[ -s "$1" ] || return 0
	callgrind_annotate --inclusive=yes --auto=no --threshold=100 "$1" >"$2" 2>/dev/null
	awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }' "$2"
}

stop_edge() {
	kill -TERM "$EPID" 2>/dev/null
	wait_gone "$EPID" 60 || kill -KILL "$EPID" 2>/dev/null
	wait "$EPID" 2>/dev/null
}

ver=$("$HAPROXY" -v | awk 'NR == 1 { print $3 }')
echo "HAProxy $ver, nbthread 1, $N requests counted after $WARM, $CONNS connections"
printf '%-34s %14s %14s %12s %12s\n' case "instr/request" "vs alone" "sys/request" "agent sys"
declare -A IR
for c in "${CASES[@]}"; do
	prepare "$c" || { FAILED=1; continue; }
	# instrumentation off until the warm-up is done: only the N requests
	# between "-i on" and "-i off" are counted, dumped with -d
	run_edge "$c" valgrind --tool=callgrind --instr-atstart=no --dump-instr=no \
		--callgrind-out-file="$DIR/cg.%p" \
		|| { echo "bench-haproxy-ir: $c: HAProxy did not start ($DIR/edge.log)" >&2; FAILED=1; continue; }
	ok=0
	client "$EPORT" "$WARM" && callgrind_control -i on "$EPID" >/dev/null 2>&1 &&
		client "$EPORT" "$N" && callgrind_control -i off "$EPID" >/dev/null 2>&1 &&
		callgrind_control -d "$EPID" >/dev/null 2>&1 && ok=1
	stop_edge
	ir=$(cg_total "$DIR/cg.$EPID.1" "$DIR/annotate")
	if [ "$ok" != 1 ] || [ -z "$ir" ]; then
		echo "bench-haproxy-ir: $c: no count (a request failed? see $DIR/edge.log)" >&2
		FAILED=1; continue
	fi
	IR[$c]=$((ir / N))
	sys=- asys=-
	if [ -n "$STRACE" ] && run_edge "$c"; then
		client "$EPORT" "$WARM" >/dev/null || echo "bench-haproxy-ir: $c: strace warm-up failed" >&2
		"$STRACE" -f -c -o "$DIR/strace" -p "$EPID" 2>/dev/null &
		sp=$!
		asp=
		if [ -n "$APID" ]; then
			"$STRACE" -f -c -o "$DIR/strace.agent" -p "$APID" 2>/dev/null &
			asp=$!
		fi
		sleep 1
		client "$EPORT" "$N" || echo "bench-haproxy-ir: $c: strace run failed" >&2
		kill -INT "$sp" 2>/dev/null; wait "$sp" 2>/dev/null
		[ -z "$asp" ] || { kill -INT "$asp" 2>/dev/null; wait "$asp" 2>/dev/null; }
		stop_edge
		sys=$(awk -v n="$N" '$NF == "total" { printf "%.2f", $4 / n }' "$DIR/strace" 2>/dev/null)
		[ -z "$asp" ] || asys=$(awk -v n="$N" '$NF == "total" { printf "%.3f", $4 / n }' "$DIR/strace.agent" 2>/dev/null)
	fi
	vs=-
	[ -n "${IR[alone]:-}" ] && vs=$(printf '%+d' $((IR[$c] - IR[alone])))
	printf '%-34s %14s %14s %12s %12s\n' "$c" "${IR[$c]}" "$vs" "${sys:--}" "${asys:--}"
	if [ -n "$TSV" ]; then
		printf 'hir_%s\t%s\n' "$c" "${IR[$c]}" >>"$TSV"
		[ "${sys:--}" = - ] || printf 'hir_sys_%s\t%s\n' "$c" "$sys" >>"$TSV"
		[ "${asys:--}" = - ] || printf 'hir_asys_%s\t%s\n' "$c" "$asys" >>"$TSV"
	fi
	if [ "$DETAIL" = 1 ]; then
		{
			echo "  $c, top inclusive functions (instructions per request):"
			awk -v n="$N" -v top="$TOP" '/ file:function$/ { on = 1; next }
				on && /^ *[0-9,]+ \(/ && k < top {
				v = $1; gsub(",", "", v); sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "")
				printf "    %8.0f  %s\n", v / n, $0; k++ }' "$DIR/annotate"
			if [ "$c" != alone ] && [ -s "$T/alone/annotate" ]; then
				echo "  $c, what it adds over alone (inclusive instructions per request):"
				awk -v n="$N" '/ file:function$/ { on = 1; next }
					on && /^ *[0-9,]+ \(/ {
					v = $1; gsub(",", "", v); sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "")
					d[$0] += (FILENAME == ARGV[1] ? v : -v) }
					END { for (f in d) if (d[f] / n >= 50) printf "    %8.0f  %s\n", d[f] / n, f }' \
					"$DIR/annotate" "$T/alone/annotate" | sort -rn | head -n "$TOP"
			fi
			[ "${sys:--}" = - ] || { echo "  syscalls (strace -c):"; sed -n '3,14p' "$DIR/strace" | sed 's/^/    /'; }
			[ "${asys:--}" = - ] || { echo "  the agent's syscalls (strace -c):"; sed -n '3,14p' "$DIR/strace.agent" | sed 's/^/    /'; }
		} >>"$T/detail"
	fi
done
[ "$DETAIL" = 1 ] && { echo; cat "$T/detail" 2>/dev/null; }
exit "$FAILED"
