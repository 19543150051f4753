#!/usr/bin/env bash
# Build and run the libFuzzer harnesses in tests/fuzz/ (clang, ASan + UBSan).
#
#   tools/fuzz.sh [SECONDS] [HARNESS...]     default 60 s each, all harnesses
#
# Each harness fuzzes a working corpus in $FUZZ_OUT/corpus/<name> (under
# build/: it grows there, run after run, and is never committed), seeded
# from tests/fuzz/seeds/<name> (real HAProxy frames, example configs) and
# tests/fuzz/corpus/<name> (the committed minimized corpus: the fewest inputs
# that reach every edge the seeds do not); crashes land in
# $FUZZ_OUT/artifacts/ and make the script fail. The last line of each run
# (cov, ft, exec/s) is summarised at the end.
#
# Knobs (environment):
#   FUZZ_OUT=build/fuzz   where binaries, logs, corpora and artifacts go
#   FUZZ_PARALLEL=1       run the harnesses at the same time (one process
#                         each; the default runs them one after the other)
#   FUZZ_MERGE=1          afterwards, minimise the working corpus together
#                         with tests/fuzz/corpus/<name> back into the latter:
#                         libFuzzer's -merge=1 on edges only (-use_counters=0),
#                         less what the seeds reach (they stay as they are);
#                         at most REGRESS_CORPUS_MAX files a harness
#                         (tests/unit/test_regress.c replays and counts them)
#   FUZZ_REPLAY=1         no fuzzing: run every committed seed and corpus
#                         input once (a fast regression pass)
#   CLANG=clang           the compiler (Debian's clang 14 has libFuzzer)
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-60}
shift || true
all=(fuzz_spop fuzz_conn fuzz_config fuzz_module_args)
names=("${@:-${all[@]}}")
out=${FUZZ_OUT:-build/fuzz}
clang=${CLANG:-clang}
mkdir -p "$out/corpus" "$out/artifacts"

# Modules each harness links (spoa/<folder>/<module>.c by its stem, or a
# path: module/rl_args).
modules() {
	case $1 in
	fuzz_spop)   echo "spop spop_write spop_hdrs" ;;
	fuzz_conn)   echo "conn conn_notify conn_ack spop spop_write spop_hdrs window window_args stored module/rl_args headers config config_directives config_policy config_check config_lex config_routes redis_url log metrics live live_rule denied" ;;
	fuzz_config) echo "config config_directives config_policy config_check config_lex config_routes redis_url window stored module/rl_args" ;;
	fuzz_module_args) echo "module/rl_args" ;;
	*) echo "unknown harness: $1" >&2; return 1 ;;
	esac
}

build() {
	local name=$1 srcs=() m inc=()
	shopt -s nullglob
	for m in spoa spoa/*/; do inc+=("-I${m%/}"); done
	for m in $(modules "$name"); do
		# spoa/$m[.]c is a glob, so that nullglob drops it when the module
		# lives in a folder (spoa/<folder>/$m.c) instead
		case $m in */*) srcs+=("$m.c") ;; *) srcs+=(spoa/$m[.]c spoa/*/$m.c) ;; esac
	done
	"$clang" -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
		-Wall -Wextra -Werror -Wno-unused-parameter -pthread "${inc[@]}" -Imodule \
		-DSPOA_VERSION='"fuzz"' \
		"tests/fuzz/$name.c" "${srcs[@]}" -o "$out/$name" -lev -lhiredis -lm
}

# run NAME: fuzz for $secs seconds; prints the summary line to $out/NAME.summary
run() {
	local name=$1 seeds=tests/fuzz/seeds/$1 corpus=tests/fuzz/corpus/$1 work=$out/corpus/$1 dict=() rc=0
	mkdir -p "$work" "$corpus"
	[ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")
	if [ "${FUZZ_REPLAY:-0}" = 1 ]; then
		"$out/$name" -runs=0 "${dict[@]}" "$seeds" "$corpus" >"$out/$name.log" 2>&1 || rc=$?
	else
		ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
		"$out/$name" -max_total_time="$secs" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
			-artifact_prefix="$out/artifacts/$name-" "${dict[@]}" \
			"$work" "$corpus" "$seeds" >"$out/$name.log" 2>&1 || rc=$?
	fi
	{
		printf '%-12s rc=%d ' "$name" "$rc"
		grep -E '^#[0-9]+' "$out/$name.log" | tail -n 1 | sed 's/^#\([0-9]*\)[[:space:]]*\([A-Z]*\)/runs=\1 \2/'
		grep -E 'stat::average_exec_per_sec' "$out/$name.log" | sed 's/stat::average_exec_per_sec:[[:space:]]*/  avg exec\/s=/'
	} | tr -s ' \n' ' ' > "$out/$name.summary"
	echo >> "$out/$name.summary"
	return "$rc"
}

# merge NAME: the smallest set of inputs from the committed corpus and the
# working one that reaches every edge the seeds do not, written back as
# tests/fuzz/corpus/NAME. Edges only (-use_counters=0): with hit counts too,
# the committed set was over a thousand files for the same coverage. The
# seeds are put in first so that libFuzzer counts what they reach, then
# taken out again (they are committed on their own).
merge() {
	local name=$1 corpus=tests/fuzz/corpus/$1 seeds=tests/fuzz/seeds/$1 new=$out/merge-$1 f
	rm -rf "$new"; mkdir -p "$new" "$corpus"
	cp "$seeds"/* "$new"/
	"$out/$name" -merge=1 -use_counters=0 "$new" "$corpus" "$out/corpus/$name" >"$out/$name.merge.log" 2>&1
	for f in "$seeds"/*; do rm -f "$new/$(basename "$f")"; done
	rm -rf "$corpus"; mv "$new" "$corpus"
	echo "merged $name: $(ls "$corpus" | wc -l) files in $corpus"
}

for n in "${names[@]}"; do
	echo "== build $n"
	build "$n"
done

status=0
pids=()
for n in "${names[@]}"; do
	echo "== fuzz $n (${secs}s)"
	if [ "${FUZZ_PARALLEL:-0}" = 1 ]; then
		run "$n" & pids+=($!)
	else
		run "$n" || status=1
	fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done

for n in "${names[@]}"; do
	cat "$out/$n.summary"
	if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|SUMMARY:' "$out/$n.log"; then
		echo "   crash: see $out/$n.log and $out/artifacts/"
		status=1
	fi
done
if [ "${FUZZ_MERGE:-0}" = 1 ] && [ $status -eq 0 ]; then
	for n in "${names[@]}"; do merge "$n"; done
fi
exit $status
