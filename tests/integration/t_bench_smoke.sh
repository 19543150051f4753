#!/usr/bin/env bash
# spoa-bench against the real agent: pipelined load over several connections
# and threads is answered in full, every ACK carries allow or deny, and the
# totals match what Redis recorded. Counts only, no timing. Then make bench's
# section (i) on a few decisions: it still edits and runs the real script.
. "$(dirname "$0")/../lib.sh"
t_setup
start_redis
# Exact counts: a generous deadline, so a loaded machine cannot turn an
# answer into a (fail-closed) redis-timeout error.
start_agent "policy transfer 5/1m
threads 2
redis-timeout 2s"
out=$("$BENCH" -a "127.0.0.1:$AGENT_PORT" -c 4 -T 2 -d 16 -n 2000 -k 50 --key-prefix BENCH- \
	--strict --json 2>"$T/bench.err"); rc=$?
eq "spoa-bench exits 0 (no protocol error, no error ACK)" 0 "$rc"
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$out" "$1" 2>/dev/null; }
allow=$(field allow); deny=$(field deny); err=$(field error)
eq "2000 NOTIFYs, 2000 answers" 2000 "$((allow + deny + err))"
eq "no error answers" 0 "$err"
# 50 accounts x 5 per minute: exactly 250 admitted, whatever the interleaving
eq "exactly 50 x 5 admitted" 250 "$allow"
members=0
for i in $(seq 0 49); do members=$((members + $(rcli ZCARD "transfer:limit:v1:BENCH-$i"))); done
eq "Redis holds one member per admitted request" 250 "$members"
# --split (one write per NOTIFY, as HAProxy 3.x sends them): the same
# load, on other accounts, answered in full with the same counts
out=$("$BENCH" -a "127.0.0.1:$AGENT_PORT" -c 4 -T 2 -d 16 -n 2000 -k 50 --key-prefix SPLIT- \
	--split --strict --json 2>"$T/bench-split.err"); rc=$?
eq "spoa-bench --split exits 0" 0 "$rc"
allow=$(field allow); deny=$(field deny); err=$(field error)
eq "--split: 2000 NOTIFYs, 2000 answers" 2000 "$((allow + deny + err))"
eq "--split: exactly 50 x 5 admitted" 250 "$allow"

BENCH_IR_DECISIONS=64 BENCH_IR_WARM=64 BENCH_IR_BATCHES="32 1" BENCH_IR_TSV="$T/ir.tsv" \
	"$ROOT/tools/bench-redis-ir.sh" >"$T/ir.out" 2>&1; rc=$?
eq "bench-redis-ir.sh exits 0" 0 "$rc"
[ "$rc" = 0 ] || cat "$T/ir.out"
eq "it counts instructions per decision, batched and not" 2 \
	"$(grep -Ec "^ir_b(32|1)"$'\t'"[1-9][0-9]*\$" "$T/ir.tsv" 2>/dev/null)"
eq "and GCRA's beside the log's" 2 \
	"$(grep -Ec "^ir_gcra_b(32|1)"$'\t'"[1-9][0-9]*\$" "$T/ir.tsv" 2>/dev/null)"
# make bench's pooled row: redis-server's CPU per decision with every
# decision in one pool, beside the unpooled one, and the decisions per
# second one pool takes (tools/bench-module-cpu.sh, a few decisions: the
# figures mean nothing here, the feed must be answered without an error);
# and the report's pool section from them.
if [ -e "$ROOT/module/ratelimit.so" ]; then
	BENCH_CPU_N=320 BENCH_CPU_ROUNDS=1 BENCH_CPU_TSV="$T/cpu.tsv" \
		"$ROOT/tools/bench-module-cpu.sh" >"$T/cpu.out" 2>&1; rc=$?
	eq "bench-module-cpu.sh exits 0" 0 "$rc"
	eq "its feeds get no error reply" 0 "$(grep -c ': errors' "$T/cpu.out")"
	[ "$rc" = 0 ] || cat "$T/cpu.out"
	eq "it measures a pooled decision, each engine, batched and not" 4 \
		"$(grep -Ec "^cpu_us_pool_(script|module)_b(32|1)"$'\t' "$T/cpu.tsv" 2>/dev/null)"
	eq "and the decisions per second one pool takes" 4 \
		"$(grep -Ec "^pool_dps_(script|module)_b(32|1)"$'\t' "$T/cpu.tsv" 2>/dev/null)"
	{ printf 'c_p1\t1\nc_p16\t16\nir_b32\t100\nir_pool_b32\t250\nir_mod_b32\t20\n'
	  printf 'ir_pool_mod_b32\t50\nhir_full\t1000\nhir_nodone\t990\n'; cat "$T/cpu.tsv"; } >"$T/res.tsv"
	python3 "$ROOT/tools/bench-report.py" "$T/res.tsv" "$T/report.md" '' "$T" >"$T/report.out" 2>&1
	check "the report has the pooled section" grep -q '^### (i) A pooled decision against an unpooled one' \
		"$T/report.md"
	check "the report says what the ratelimit-done line costs a policy without inflight=" \
		grep -q '^The response line (`ratelimit-done`, issue 38) to a policy without `inflight=`: +10 HAProxy' "$T/report.md"
	check "with the pooled instructions beside the log's" grep -q '^| 32 | 100 | 250 | 2.50x | 20 | 50 | 2.50x |' \
		"$T/report.md"
fi

# tools/bench-legs.sh (make bench's section u) on a few decisions: every
# layout (TCP, unix to the agent, unix on both legs) answers in full and is
# counted.
BENCH_LEGS_N=2000 BENCH_LEGS_ROUNDS=1 BENCH_LEGS_TSV="$T/legs.tsv" \
	"$ROOT/tools/bench-legs.sh" >"$T/legs.out" 2>&1; rc=$?
eq "bench-legs.sh exits 0" 0 "$rc"
[ "$rc" = 0 ] || cat "$T/legs.out"
eq "it reports each layout's CPU per decision" 3 \
	"$(grep -Ec "^legs_(tcp|unix1|unix)_total_us"$'\t'"[0-9.]+\$" "$T/legs.tsv" 2>/dev/null)"
# tools/bench-agent-ir.sh on a few decisions: the agent's and the floor's
# instructions and syscalls per decision (callgrind, strace). Valgrind
# cannot run a sanitizer build (make sanitize, make tsan): there, only the
# checks above.
if ldd "$AGENT" 2>/dev/null | grep -Eq 'lib(a|t)san'; then
	echo "# bench-agent-ir.sh skipped: $AGENT is a sanitizer build (valgrind cannot run it)"
	t_done
	exit
fi
BENCH_AIR_N=300 BENCH_AIR_WARM=100 BENCH_AIR_SHAPES="4x4 4x4s" BENCH_AIR_ENGINES="floor script" \
	BENCH_AIR_TSV="$T/air.tsv" "$ROOT/tools/bench-agent-ir.sh" >"$T/air.out" 2>&1; rc=$?
eq "bench-agent-ir.sh exits 0" 0 "$rc"
[ "$rc" = 0 ] || cat "$T/air.out"
eq "it counts the floor's and the agent's instructions per decision" 2 \
	"$(grep -Ec "^air_(floor|script)_c4d4"$'\t'"[1-9][0-9]*\$" "$T/air.tsv" 2>/dev/null)"
eq "and in the split shape (spoa-bench --split, 3.x's one write per NOTIFY)" 2 \
	"$(grep -Ec "^air_(floor|script)_c4d4s"$'\t'"[1-9][0-9]*\$" "$T/air.tsv" 2>/dev/null)"
# tools/bench-haproxy-ir.sh on a few requests: HAProxy's instructions per
# request on make bench's no-JWT edge (tools/edge-nojwt.sh), alone
# (tools/edge-alone.sh) and asking the SPOE floor, with the full edge and
# the lean one; every answer a 201.
BENCH_HIR_N=40 BENCH_HIR_WARM=10 BENCH_HIR_CONNS=4 BENCH_HIR_STRACE=0 \
	BENCH_HIR_TSV="$T/hir.tsv" "$ROOT/tools/bench-haproxy-ir.sh" alone floor floor+ietf >"$T/hir.out" 2>&1; rc=$?
eq "bench-haproxy-ir.sh exits 0" 0 "$rc"
[ "$rc" = 0 ] || cat "$T/hir.out"
hir() { awk -F'\t' -v k="hir_$1" '$1 == k { print $2 }' "$T/hir.tsv" 2>/dev/null; }
alone=$(hir alone); floor=$(hir floor)
eq "it counts HAProxy's instructions per request, alone and with SPOE" 2 \
	"$(grep -Ec "^hir_(alone|floor)"$'\t'"[1-9][0-9]*\$" "$T/hir.tsv" 2>/dev/null)"
more=no
[ "${alone:-0}" -gt 0 ] && [ "${floor:-0}" -gt "$alone" ] && more=yes
eq "the SPOE exchange adds instructions to HAProxy's request (alone ${alone:-?}, floor ${floor:-?})" \
	yes "$more"
# the lean edge (RL_IETF_ONLY, knob ietf) runs three header rules fewer
lean=$(hir floor+ietf)
less=no
[ "${lean:-0}" -gt 0 ] && [ "${lean:-0}" -lt "${floor:-0}" ] && less=yes
eq "the lean edge costs HAProxy fewer instructions (floor ${floor:-?}, lean ${lean:-?})" yes "$less"
t_done
