#!/usr/bin/env bash
# bench-memory.sh - Redis memory per busy account and Redis time per
# decision, sliding log versus precision= buckets versus GCRA
# (algorithm=gcra, burst = the limit: one string per account) (make bench's
# section m; also runs alone: tools/bench-memory.sh).
#
# Memory: one account filled to its limit with requests spread evenly over
# its window (cost 1 each, the worst case for the log), then MEMORY USAGE
# <key> SAMPLES 0. The fill runs a copy of lua/sliding_window.lua whose clock
# is a hash the script sets (TIME replaced by a read), so a 24h window fills
# in a second; the structures are the real script's.
# Time: redis-benchmark EVALSHA of the real script, then INFO commandstats
# usec_per_call, on busy accounts (each gets twice its limit: full, half
# the calls denied) and on 10,000 accounts (mostly admitted).
#
# Prints a table; with BENCH_MEM_TSV=FILE also writes name<TAB>value lines
# (make bench folds them into its report). Knobs: BENCH_MEM_CALLS=40000.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=../tests/lib.sh
. tests/lib.sh
t_setup
start_redis >/dev/null || { echo "bench-memory: redis-server did not start" >&2; exit 1; }
CALLS=${BENCH_MEM_CALLS:-40000}
TSV=${BENCH_MEM_TSV:-}
SCRIPT=lua/sliding_window.lua
SHA=$(rcli SCRIPT LOAD "$(cat "$SCRIPT")")
CSHA=$(rcli SCRIPT LOAD "$(sed "s/local t = redis.call('TIME')/local t = redis.call('HMGET', 'bm:clock', 's', 'us')/" "$SCRIPT")")
[ ${#SHA} -eq 40 ] && [ ${#CSHA} -eq 40 ] || { echo "bench-memory: script did not load" >&2; exit 1; }

out() { [ -n "$TSV" ] && printf '%s\t%s\n' "$1" "$2" >>"$TSV"; }

# fill KEY LIMIT WINDOW_MS WINARG: LIMIT cost-1 requests evenly over the
# window on the script's own clock; prints MEMORY USAGE and the last reply's
# remaining (0 when the account is full).
fill() {
	local key=$1 limit=$2 ms=$3 arg=$4
	awk -v k="$key" -v n="$limit" -v ms="$ms" -v arg="$arg" -v sha="$CSHA" 'BEGIN {
		start = 1800000000 * 1000000
		for (i = 0; i < n; i++) {
			t = start + int(i * ms * 1000 / n)
			printf "HSET bm:clock s %d us %d\n", int(t / 1000000), t % 1000000
			printf "EVALSHA %s 1 %s 1 %d %s\n", sha, k, n, arg
		}
	}' | rcli >"$T/fill.out"
	printf '%s %s\n' "$(rcli MEMORY USAGE "$key" SAMPLES 0)" "$(tail -n 4 "$T/fill.out" | head -n 1)"
	rcli DEL "$key" >/dev/null
}

# usec NAME KEYPREFIX ACCOUNTS LIMIT WINARG: usec_per_call of EVALSHA
usec() {
	local prefix=$2 accounts=$3 limit=$4 arg=$5
	rcli FLUSHALL >/dev/null
	rcli CONFIG RESETSTAT >/dev/null
	redis-benchmark -p "$REDIS_PORT" -c 16 -n "$CALLS" -r "$accounts" -q \
		EVALSHA "$SHA" 1 "${prefix}__rand_int__" 1 "$limit" "$arg" >/dev/null
	rcli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p'
}

printf '%-10s %-16s %14s %10s %16s %16s\n' policy storage "bytes/account" entries "us/call (busy)" "us/call (10k)"
while read -r name limit ms prec pname; do
	for mode in log bucket gcra; do
		if [ "$mode" = log ]; then
			arg=$ms kind=v1 label=log
		elif [ "$mode" = gcra ]; then
			arg="gcra:$ms:$limit" kind=g1 label="algorithm=gcra"
		else
			[ "$prec" = - ] && { printf '%-10s %-16s %14s\n' "$name" "precision: n/a" "(window <= 1s)"; continue; }
			arg="$ms:$prec" kind=b1 label="precision=$pname"
		fi
		read -r bytes rem < <(fill "bm:limit:$kind:ACC" "$limit" "$ms" "$arg")
		# (a bucket fed at its rate stays nearly full: one value whatever it holds)
		[ "$rem" = 0 ] || [ "$mode" = gcra ] ||
			echo "bench-memory: $name $label: account not full (remaining $rem)" >&2
		entries=$limit
		[ "$mode" = bucket ] && entries=$((ms / prec))
		[ "$mode" = gcra ] && entries=1
		busy=$(usec "$name" "bm:limit:$kind:" $(( CALLS / limit / 2 > 1 ? CALLS / limit / 2 : 1 )) "$limit" "$arg")
		wide=$(usec "$name" "bm:limit:$kind:" 10000 "$limit" "$arg")
		printf '%-10s %-16s %14s %10s %16s %16s\n' "$name" "$label" "$bytes" "$entries" "$busy" "$wide"
		tag="mem_${name//\//_}_$mode"
		out "${tag}_bytes" "$bytes"
		out "${tag}_label" "$label"
		out "${tag}_usec_busy" "$busy"
		out "${tag}_usec_wide" "$wide"
	done
done <<'EOF'
10/1s 10 1000 - -
1000/1h 1000 3600000 60000 1m
10000/24h 10000 86400000 900000 15m
EOF
out mem_redis "$(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')"
