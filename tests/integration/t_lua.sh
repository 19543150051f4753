#!/usr/bin/env bash
# lua/sliding_window.lua against a real redis-server: admission, denial that
# records nothing, reset/retry values, the trim boundary, cost > 1 as one
# entry (Redis work and memory independent of cost), several windows
# all-or-nothing, PEXPIRE (and its 1 ms margin), unique members, a member
# not of the script's form refused, bad arguments (nan, inf, fractions,
# short batches), a batch of single- and multi-window decisions (offsets),
# and bucketed windows (precision=): bucket boundaries, retry from bucket
# ends, TTL after a clock step back, mixed with a log. (Over maxmemory:
# t_oom.py.)
#
# Two clocks: the real script (Redis TIME) for behaviour, and a copy whose
# TIME is read from a hash the test sets, for exact boundaries (an entry
# exactly one window old is out) that real time cannot pin down.
. "$(dirname "$0")/../lib.sh"
t_setup
start_redis || { fail "redis-server started"; t_done; exit 1; }

SCRIPT=$ROOT/lua/sliding_window.lua
SHA=$(rcli SCRIPT LOAD "$(cat "$SCRIPT")")
check "script loads (sha $SHA)" test ${#SHA} -eq 40

# ev NKEYS KEYS... COST LIMIT MS [LIMIT MS...]: one decision; the reply
# goes into R[0..5].
ev() {
	local nkeys=$1; shift
	local keys=("${@:1:nkeys}"); shift "$nkeys"
	local cost=$1; shift
	mapfile -t R < <(rcli EVALSHA "$SHA" "$nkeys" "${keys[@]}" "$cost" "$@")
}
# in_range what value lo hi: lo <= value <= hi
in_range() {
	if [ "$2" -ge "$3" ] 2>/dev/null && [ "$2" -le "$4" ]; then ok "$1"
	else fail "$1: $2 not in [$3, $4]"; fi
}
redis_now_us() { local t; mapfile -t t < <(rcli TIME); echo $((t[0] * 1000000 + 10#${t[1]})); }

# --- 3 per 10s: three admitted, then denied ----------------------------------
# (10 s, not 1 s: the checks below spawn redis-cli many times, and a loaded
# machine must not let the entries expire between two of them)
K=transfer:limit:v1:ACC-1001
ev 1 $K 1 3 10000
eq "1st allowed" "1 3 2 0 0" "${R[0]} ${R[1]} ${R[2]} ${R[4]} ${R[5]}"
eq "1st: empty set, reset is the whole window" 10000000 "${R[3]}"
ev 1 $K 1 3 10000
eq "2nd allowed, remaining 1" "1 1" "${R[0]} ${R[2]}"
in_range "2nd: reset within the window" "${R[3]}" 1 10000000
ev 1 $K 1 3 10000
eq "3rd allowed, remaining 0" "1 0" "${R[0]} ${R[2]}"
ev 1 $K 1 3 10000
eq "4th denied, limit 3, remaining 0" "0 3 0" "${R[0]} ${R[1]} ${R[2]}"
in_range "4th: retry within the window" "${R[4]}" 1 10000000
eq "4th: cost 1 fits when the oldest leaves (retry = reset)" "${R[3]}" "${R[4]}"
ev 1 $K 1 3 10000
eq "5th denied" 0 "${R[0]}"
eq "denials are not recorded (ZCARD stays 3)" 3 "$(rcli ZCARD $K)"
in_range "PTTL set, at most the window + 1 ms" "$(rcli PTTL $K)" 1 10001
mapfile -t M < <(rcli ZRANGE $K 0 -1)
eq "members unique, one per admitted request" 3 "$(printf '%s\n' "${M[@]}" | sort -u | wc -l)"
eq "members are <cum>:<cost>" "1:1 2:1 3:1" \
	"$(printf '%s\n' "${M[@]}" | sort | xargs)"

# A denial does not touch the TTL: mark it, deny, look again.
rcli PEXPIRE $K 123456789 >/dev/null
ev 1 $K 1 3 10000
eq "denied again" 0 "${R[0]}"
in_range "a denial leaves the TTL alone" "$(rcli PTTL $K)" 123000000 123456789
rcli PEXPIRE $K 1000 >/dev/null

sleep 1.1
ev 1 $K 1 3 10000
eq "after the window passed: admitted again, remaining 2" "1 2" "${R[0]} ${R[2]}"
eq "old entries trimmed" 1 "$(rcli ZCARD $K)"

# --- trim boundary with real time and a generous window ----------------------
K=b:limit:v1:trim
NOW=$(redis_now_us)
W=10000000
# (members in the script's form: 1:1 older, 2:1 exactly one window old,
# 3:1 five seconds old, 4:1 one second old)
rcli ZADD $K $((NOW - W - 5000000)) 1:1 $((NOW - W)) 2:1 \
	$((NOW - W + 5000000)) 3:1 $((NOW - 1000000)) 4:1 >/dev/null
ev 1 $K 1 100 10000
eq "trim: allowed with 2 entries left in the window" "1 97" "${R[0]} ${R[2]}"
eq "trim: 3 entries after the call" 3 "$(rcli ZCARD $K)"
eq "trim: the entry exactly one window old is gone" "" "$(rcli ZSCORE $K 2:1)"
eq "trim: older entries are gone" "" "$(rcli ZSCORE $K 1:1)"
in_range "trim: reset follows the oldest kept entry" "${R[3]}" 1 5000000

# --- cost > 1 ----------------------------------------------------------------
K=c:limit:v1:cost
ev 1 $K 2 5 10000
eq "cost 2: allowed, remaining 3" "1 3" "${R[0]} ${R[2]}"
eq "cost 2: one entry carrying its cost" "2:2" "$(rcli ZRANGE $K 0 -1)"
ev 1 $K 3 5 10000
eq "cost 3: allowed, remaining 0" "1 0" "${R[0]} ${R[2]}"
ev 1 $K 1 5 10000
eq "cost 1 at the limit: denied" 0 "${R[0]}"
eq "one entry per admitted request, unique" 2 "$(rcli ZRANGE $K 0 -1 | sort -u | wc -l)"

# A large cost is one entry: Redis work and memory do not grow with it.
K=c:limit:v1:big
ev 1 $K 1234 2000 10000
eq "cost 1234: allowed, remaining 766" "1 766" "${R[0]} ${R[2]}"
eq "cost 1234: one entry" 1 "$(rcli ZCARD $K)"
K=c:limit:v1:huge
rcli CONFIG RESETSTAT >/dev/null
ev 1 $K 1000000 1000000 3600000
eq "cost 1000000: allowed, remaining 0" "1 0" "${R[0]} ${R[2]}"
eq "cost 1000000: one entry (hex)" "f4240:f4240" "$(rcli ZRANGE $K 0 -1)"
in_range "cost 1000000: the key stays small (MEMORY USAGE)" "$(rcli MEMORY USAGE $K)" 1 1000
ev 1 $K 1 1000000 3600000
eq "cost 1 after it: denied, remaining 0" "0 0" "${R[0]} ${R[2]}"
# commandstats: two calls; each used to take 0.2 s per 100000 units (one
# member per unit). Not a timing assertion: the call count proves nothing
# ran twice, the key size above proves no per-unit work.
eq "commandstats: both calls counted" 2 \
	"$(rcli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')"

# retry for cost 3 with 5 in the window: the 3rd oldest must leave.
K=c:limit:v1:retry
for i in 1 2 3 4 5; do ev 1 $K 1 5 10000; done
ev 1 $K 3 5 10000
eq "cost 3 over 5/5: denied, remaining 0" "0 0" "${R[0]} ${R[2]}"
mapfile -t S < <(rcli ZRANGE $K 0 -1 WITHSCORES)
# reset = s0 + W - now, so now = s0 + W - reset; retry must be s2 + W - now.
S0=${S[1]}; S2=${S[5]}
eq "retry = score of rank (count+cost-limit-1) + window - now" \
	$((S2 - S0 + R[3])) "${R[4]}"

# cost above the limit: never admissible, no loop, nothing written.
K=c:limit:v1:toobig
ev 1 $K 5 3 1000
eq "cost > limit: denied, retry = the window" "0 3 3 1000000 1000000" \
	"${R[0]} ${R[1]} ${R[2]} ${R[3]} ${R[4]}"
eq "cost > limit: nothing written" 0 "$(rcli EXISTS $K)"

# --- several windows: all-or-nothing -----------------------------------------
A='m:limit:v1:{ACC-7}:10s'; B='m:limit:v1:{ACC-7}:1h'
ev 2 "$A" "$B" 2 3 10000 4 3600000
eq "2 windows: cost 2 allowed; deciding = least remaining (10s: 1)" "1 3 1 0" \
	"${R[0]} ${R[1]} ${R[2]} ${R[5]}"
ev 2 "$A" "$B" 2 3 10000 4 3600000
eq "2 windows: the 10s window denies" "0 3 1 0" "${R[0]} ${R[1]} ${R[2]} ${R[5]}"
eq "2 windows: nothing recorded in the 1h window either" "2:2" "$(rcli ZRANGE "$B" 0 -1)"
eq "2 windows: nor in the 10s window" "2:2" "$(rcli ZRANGE "$A" 0 -1)"
in_range "PTTL of the 10s key" "$(rcli PTTL "$A")" 1 10001
in_range "PTTL of the 1h key" "$(rcli PTTL "$B")" 10002 3600001

A='m:limit:v1:{ACC-8}:10s'; B='m:limit:v1:{ACC-8}:1h'
ev 2 "$A" "$B" 1 10 10000 2 3600000
ev 2 "$A" "$B" 1 10 10000 2 3600000
eq "2 windows: second admitted, deciding is the 1h window" "1 2 0 1" \
	"${R[0]} ${R[1]} ${R[2]} ${R[5]}"
ev 2 "$A" "$B" 1 10 10000 2 3600000
eq "2 windows: the 1h window denies (index 1, limit 2)" "0 2 0 1" \
	"${R[0]} ${R[1]} ${R[2]} ${R[5]}"
eq "2 windows: the 10s window kept its 2" 2 "$(rcli ZCARD "$A")"

A='m:limit:v1:{ACC-9}:10s'; B='m:limit:v1:{ACC-9}:1h'
ev 2 "$A" "$B" 1 1 10000 1 3600000
ev 2 "$A" "$B" 1 1 10000 1 3600000
eq "both windows deny: the longest retry decides (1h)" "0 1" "${R[0]} ${R[5]}"
in_range "both windows deny: retry close to an hour" "${R[4]}" 3500000000 3600000000

# --- the ACL of docs/deployment.md is enough for the script ------------------
ACL_LINE=$(grep -m1 '^ACL SETUSER ratelimit ' "$ROOT/docs/deployment.md")
read -ra ACL_ARGS <<<"${ACL_LINE#ACL SETUSER }"
eq "docs: ACL line found" ratelimit "${ACL_ARGS[0]:-}"
eq "docs: ACL user created" OK "$(rcli ACL SETUSER "${ACL_ARGS[@]}")"
acli() { redis-cli -p "$REDIS_PORT" --user ratelimit --pass s3cret --no-auth-warning "$@"; }
A='acl:limit:v1:{ACC-1}:1s'; B='acl:limit:v1:{ACC-1}:1h'
eq "ACL user: admitted" "1 1 0" "$(acli EVALSHA "$SHA" 2 "$A" "$B" 1 1 10000 5 3600000 | head -3 | xargs)"
eq "ACL user: denied (retry read from the log)" "0 1 0" \
	"$(acli EVALSHA "$SHA" 2 "$A" "$B" 1 1 10000 5 3600000 | head -3 | xargs)"
A='acl:limit:v1:{ACC-2}:1s'; B='acl:limit:b1:{ACC-2}:1h'
eq "ACL user: a bucketed window admits" "1 1 0" \
	"$(acli EVALSHA "$SHA" 2 "$A" "$B" 1 1 10000 1 3600000:60000 | head -3 | xargs)"
rcli HSET "$B" 1000 1 >/dev/null     # an expired bucket, trimmed by a denial
eq "ACL user: a bucketed window denies and trims" "0 1 0 1" \
	"$(acli EVALSHA "$SHA" 2 "$A" "$B" 1 1 10000 1 3600000:60000 | head -3 | xargs) $(rcli HLEN "$B")"
G='acl:limit:g1:{ACC-3}'
# (1/1h: nothing refills between the two calls)
eq "ACL user: a GCRA bucket admits (GET, SET)" "1 2 1" \
	"$(acli EVALSHA "$SHA" 1 "$G" 1 1 gcra:3600000:2 | head -3 | xargs)"
eq "ACL user: a GCRA bucket denies a cost above what is left" "0 2 1" \
	"$(acli EVALSHA "$SHA" 1 "$G" 2 1 gcra:3600000:2 | head -3 | xargs)"

# --- bad arguments are errors, not crashes -----------------------------------
out=$(rcli EVALSHA "$SHA" 1 x:limit:v1:k 0 3 1000)
check "cost 0 is an error reply" grep -q "bad arguments" <<<"$out"
out=$(rcli EVALSHA "$SHA" 1 x:limit:v1:k 1 3)
check "missing window length is an error reply" grep -q "bad arguments" <<<"$out"
out=$(rcli EVALSHA "$SHA" 1 x:limit:v1:k 1 req-1 3 1000)
check "a request id (the layout before 1.0) is an error reply" grep -q "bad arguments" <<<"$out"
out=$(rcli EVALSHA "$SHA" 1 x:limit:v1:k 1 0 1000)
check "limit 0 is an error reply" grep -q "bad limit" <<<"$out"
out=$(rcli EVALSHA "$SHA" 1 x:limit:b1:k 1 5 3600000:0)
check "precision 0 is an error reply" grep -q "bad limit or window" <<<"$out"
# nan passes a 'x < 1' check (every comparison with nan is false); inf and
# fractions are no counts either. Nothing is written for any of them.
for bad in nan inf 1.5 -nan; do
	out=$(rcli EVALSHA "$SHA" 1 x:limit:v1:nan "$bad" 3 1000)
	check "cost $bad is an error reply" grep -q "bad arguments" <<<"$out"
	out=$(rcli EVALSHA "$SHA" 1 x:limit:v1:nan 1 "$bad" 1000)
	check "limit $bad is an error reply" grep -q "bad limit or window" <<<"$out"
	out=$(rcli EVALSHA "$SHA" 1 x:limit:v1:nan 1 3 "$bad")
	check "window $bad is an error reply" grep -q "bad limit or window" <<<"$out"
	out=$(rcli EVALSHA "$SHA" 1 x:limit:v1:nan batch "$bad" 1 1 3 1000)
	check "batch count $bad is an error reply" grep -q "bad batch" <<<"$out"
	out=$(rcli EVALSHA "$SHA" 1 x:limit:v1:nan batch 1 "$bad" 1 3 1000)
	check "key count $bad is an error reply" grep -q "bad batch" <<<"$out"
done
eq "nan, inf, fractions: nothing written" 0 "$(rcli EXISTS x:limit:v1:nan)"
# A batch that announces more decisions than it carries (the count read
# past the end of ARGV is no number, not an index of nil).
out=$(rcli EVALSHA "$SHA" 1 x:limit:v1:short batch 3 1 1 3 1000)
eq "batch count above its content: bad batch" "ERR sliding_window: bad batch" "$out"
out=$(rcli EVALSHA "$SHA" 1 x:limit:v1:short batch 2 1 1 3)
eq "batch cut inside a decision: bad batch" "ERR sliding_window: bad batch" "$out"
eq "short batches: nothing written" 0 "$(rcli EXISTS x:limit:v1:short)"
eq "redis still answers" PONG "$(rcli PING)"

# --- exact boundaries on a clock the test controls ---------------------------
# Same script, TIME replaced by a hash read (test copy only).
# It also records each PEXPIRE's argument in test:ttl (field = key: the
# fake clock does not reach PEXPIRE, so PTTL cannot show it), and counts the
# sorts it makes in test:sorts, and lists the commands it calls in test:cmds.
sed -e "s/local t = redis.call('TIME')/local t = redis.call('HMGET', 'test:clock', 's', 'us')/" \
	-e "s/call('PEXPIRE', key, ttl)/&; redis.call('HSET', 'test:ttl', key, ttl)/" \
	-e "s/table\.sort(/redis.call('HINCRBY', 'test:sorts', 'n', 1); &/" \
	-e "s/^local call, format, match = redis.call,/local call, format, match = function(...) redis.call('RPUSH', 'test:cmds', (...)) return redis.call(...) end,/" \
	"$SCRIPT" > "$T/clocked.lua"
check "test copy reads the fake clock" grep -q "test:clock" "$T/clocked.lua"
check "test copy records the TTLs" grep -q "test:ttl" "$T/clocked.lua"
check "test copy counts the sorts" grep -q "test:sorts" "$T/clocked.lua"
check "test copy lists the commands" grep -q "test:cmds" "$T/clocked.lua"
ttl_of() { rcli HGET test:ttl "$1"; }
CSHA=$(rcli SCRIPT LOAD "$(cat "$T/clocked.lua")")
# clock S US: set the fake clock to S seconds + US microseconds
clock() { rcli HSET test:clock s "$1" us "$2" >/dev/null; }
cev() {
	local key=$1 cost=$2 limit=$3 ms=$4
	mapfile -t R < <(rcli EVALSHA "$CSHA" 1 "$key" "$cost" "$limit" "$ms")
	# the script's PEXPIRE runs on real time, this clock does not: keep the
	# key, or a slow machine expires it between two steps
	rcli PERSIST "$key" >/dev/null
}
K=clk:limit:v1:edge
clock 1000 0          # now = 1000000000 us
rcli ZADD $K 999000000 1:1 999000001 2:1 >/dev/null   # exactly one window old, 1 us younger
cev $K 1 2 1000
eq "clock: entry exactly one window old is out" "" "$(rcli ZSCORE $K 1:1)"
eq "clock: 1 us younger stays; allowed with remaining 0, reset 1 us" "1 2 0 1 0" \
	"${R[0]} ${R[1]} ${R[2]} ${R[3]} ${R[4]}"
cev $K 1 2 1000
eq "clock: full, denied; retry and reset 1 us" "0 0 1 1" "${R[0]} ${R[2]} ${R[3]} ${R[4]}"
clock 1000 1                  # 1 us later
cev $K 1 2 1000
eq "clock: 1 us later the edge entry left: admitted" "1 0" "${R[0]} ${R[2]}"
eq "clock: the new entry is scored at Redis time" 1000000001 "$(rcli ZRANGE $K -1 -1 WITHSCORES | tail -n 1)"
eq "clock: reset counts from the oldest kept entry" 999999 "${R[3]}"

# The order of an admission's commands, and what docs/architecture.md's
# step 4 says of it: count, add, trim, TTL (a denial: count, trim).
rcli DEL test:cmds >/dev/null
cev $K 1 5 1000
eq "order: an admission counts, adds, trims, sets the TTL" \
	"ZRANGEBYSCORE ZRANGE ZADD ZREMRANGEBYSCORE PEXPIRE" "$(rcli LRANGE test:cmds 0 -1 | xargs)"
check "docs/architecture.md step 4 says the same order" \
	grep -q "adds the request only if it fits, then trims the entries that left the window" \
	"$ROOT/docs/architecture.md"
check "docs/architecture.md: the sequence diagram too" \
	grep -q "EVALSHA (TIME, count 0, ZADD, trim, PEXPIRE)" "$ROOT/docs/architecture.md"

# The TTL covers the newest entry with 1 ms to spare: PEXPIRE counts from
# Redis's time snapshot of the command (whole ms, before TIME): the key
# must not die while its entry still counts.
K=clk:limit:v1:ttl
clock 5000 500                # 0.5 ms into a ms: the snapshot says 5000.000
cev $K 1 2 1000
eq "TTL: window + 1 ms (the entry leaves 1000 ms after now)" 1001 "$(ttl_of $K)"
clock 5000 999999
cev $K 1 2 1000
eq "TTL: from the newest entry, the same" 1001 "$(ttl_of $K)"

# --- cost as one entry, on the fake clock: exact counts and retry ----------
K=clk:limit:v1:cost
clock 1000 0
cev $K 3 10 1000
eq "clock cost: 3 of 10 admitted" "1 7" "${R[0]} ${R[2]}"
clock 1000 100000
cev $K 4 10 1000
eq "clock cost: 4 more admitted" "1 3" "${R[0]} ${R[2]}"
clock 1000 200000
cev $K 2 10 1000
eq "clock cost: 2 more admitted" "1 1" "${R[0]} ${R[2]}"
clock 1000 300000
cev $K 5 10 1000
# 9 in the window, cost 5: 4 units must leave; the first entry holds 3, so
# the second (t=0.1 s) must leave too: retry 0.1 + 1 - 0.3 = 0.8 s.
eq "clock cost: cost 5 denied; retry when the 2nd entry leaves, reset when the 1st" \
	"0 1 700000 800000" "${R[0]} ${R[2]} ${R[3]} ${R[4]}"
cev $K 1 10 1000
eq "clock cost: cost 1 still fits" "1 0" "${R[0]} ${R[2]}"
clock 1001 0
cev $K 3 10 1000
eq "clock cost: the 3-unit entry left exactly one window later: 3 fit" "1 0" "${R[0]} ${R[2]}"
cev $K 1 10 1000
eq "clock cost: full; retry when the 4-unit entry leaves" "0 100000" "${R[0]} ${R[4]}"
clock 1001 99999
cev $K 1 10 1000
eq "clock cost: 1 us before, still denied (retry never early)" "0 1" "${R[0]} ${R[4]}"
clock 1001 100000
cev $K 4 10 1000
eq "clock cost: on time, its 4 units are free again" "1 0" "${R[0]} ${R[2]}"
eq "clock cost: one entry per admitted request" 4 "$(rcli ZCARD $K)"

# A clock stepped back: the entry is stamped 1 us after the newest one (it
# lives longer, never shorter) and the count stays right.
K=clk:limit:v1:back
clock 2000 0
cev $K 2 5 1000
clock 1999 500000
cev $K 1 5 1000
eq "clock back: admitted, remaining 2" "1 2" "${R[0]} ${R[2]}"
eq "clock back: stamped 1 us after the newest entry" "2000000000 2000000001" \
	"$(rcli ZRANGE $K 0 -1 WITHSCORES | sed -n '2p;4p' | xargs)"
cev $K 3 5 1000
eq "clock back: the 6th unit is denied" "0 2" "${R[0]} ${R[2]}"
# the entry at 2000.000001 leaves at 2001.000001, 1500.001 ms after now
eq "clock back: TTL from the stamp, rounded up, + 1 ms" 1502 "$(ttl_of $K)"

# A member the script never writes (another program's, or a layout of
# before 1.0) is not counted as anything: the decision is an error and
# writes nothing, at either end of the window.
K=clk:limit:v1:foreign
clock 3000 0
rcli ZADD $K 2999500000 0123456789abcdef-0-1:1 >/dev/null
cev $K 1 5 1000
eq "foreign member (oldest): bad entry" "ERR sliding_window: bad entry" "${R[0]}"
eq "foreign member: nothing written" 1 "$(rcli ZCARD $K)"
rcli DEL $K >/dev/null
cev $K 1 5 1000
rcli ZADD $K 3000000100 2:1:b2d05e64 >/dev/null
cev $K 1 5 1000
eq "foreign member (newest, a 3-field one): bad entry" "ERR sliding_window: bad entry" "${R[0]}"
eq "foreign member: nothing written either" 2 "$(rcli ZCARD $K)"

# --- a batch: a multi-window decision after others, on the fake clock ------
# Every decision has its own cost, limits and windows, so that a decision
# read at another's offset (KEYS or ARGV) answers or stores differently.
# (4) repeats (2)'s keys and is denied by the bucketed window.
K1=clk:limit:v1:bat1 KA='clk:limit:v1:{bat2}:10s' KB='clk:limit:b1:{bat2}:1h'
KC='clk:limit:v1:{bat3}:2s' KD='clk:limit:v1:{bat3}:1m'
clock 60000 0
rcli ZADD "$KD" 59999000000 3:3 >/dev/null       # 3 units, 1 s old
mapfile -t R < <(rcli EVALSHA "$CSHA" 7 "$K1" "$KA" "$KB" "$KC" "$KD" "$KA" "$KB" batch 4 \
	1 2 5 1000 \
	2 3 8 10000 4 3600000:60000 \
	2 1 7 2000 9 60000 \
	2 3 8 10000 4 3600000:60000)
rcli PERSIST "$K1" "$KA" "$KB" "$KC" "$KD" >/dev/null
eq "batch (1) single window: allowed, remaining 3, reset 1 s" "1 5 3 1000000 0 0" "${R[*]:0:6}"
eq "batch (2) log + buckets: the bucketed window decides (index 1, remaining 1)" \
	"1 4 1 3660000000 0 1" "${R[*]:6:6}"
eq "batch (3) two logs: the 1m window decides (3 + 1 of 9)" "1 9 5 59000000 0 1" "${R[*]:12:6}"
eq "batch (4) (2) again: denied by the buckets, retry when the bucket leaves" \
	"0 4 1 3660000000 3660000000 1" "${R[*]:18:6}"
eq "batch: 24 integers, nothing else" 24 "${#R[@]}"
eq "batch: each key holds its own decision's entries" "2:2|3:3|60060000 3|1:1|3:3 4:1" \
	"$(rcli ZRANGE "$K1" 0 -1 | xargs)|$(rcli ZRANGE "$KA" 0 -1 | xargs)|$(rcli HGETALL "$KB" | xargs)|$(rcli ZRANGE "$KC" 0 -1 | xargs)|$(rcli ZRANGE "$KD" 0 -1 | xargs)"
eq "batch: each key's TTL from its own window" "1001 10001 3660001 2001 60001" \
	"$(for k in "$K1" "$KA" "$KB" "$KC" "$KD"; do ttl_of "$k"; done | xargs)"

# --- bucketed windows (precision=) on the fake clock -------------------------
# 5 per 1h counted in 1m buckets: hash field = bucket end (ms), value = units.
# cevb KEYS... -- COST LIMIT WIN [LIMIT WIN...]: cev for any number of keys.
cevb() {
	local keys=()
	while [ "$1" != -- ]; do keys+=("$1"); shift; done
	shift
	mapfile -t R < <(rcli EVALSHA "$CSHA" "${#keys[@]}" "${keys[@]}" "$@")
	rcli PERSIST "${keys[@]}" >/dev/null
}
K=clk:limit:b1:bucket
clock 3600 0                  # now = 3600 s, the start of a 1m bucket (ends 3660 s)
cevb $K -- 3 5 3600000:60000
eq "bucket: 3 of 5 admitted; reset = bucket end + window" "1 5 2 3660000000 0" \
	"${R[0]} ${R[1]} ${R[2]} ${R[3]} ${R[4]}"
eq "bucket: a hash field per bucket, named by its end (ms)" "hash 3660000 3" \
	"$(rcli TYPE $K) $(rcli HGETALL $K | xargs)"
in_range "bucket: PEXPIRE = bucket end + window - now + 1 ms" "$(rcli EVALSHA "$SHA" 1 clk:limit:b1:ttl 1 5 3600000:60000 >/dev/null; rcli PTTL clk:limit:b1:ttl)" 3599000 3660001
clock 3659 999999             # last us of the same bucket
cevb $K -- 2 5 3600000:60000
eq "bucket: same bucket, 2 more (full)" "1 0 1" "${R[0]} ${R[2]} $(rcli HLEN $K)"
clock 3660 0                  # next bucket
cevb $K -- 1 5 3600000:60000
eq "bucket: full: denied; retry when the bucket's end is one window old (1 h)" \
	"0 0 3600000000 3600000000" "${R[0]} ${R[2]} ${R[3]} ${R[4]}"
eq "bucket: a denial writes nothing" "1" "$(rcli HLEN $K)"
clock 7200 0                  # the log would have let the 3 of 3600 s go
cevb $K -- 3 5 3600000:60000
eq "bucket: the partly expired oldest bucket still counts whole" "0 60000000" "${R[0]} ${R[4]}"
clock 7259 999999             # 1 us before the retry
cevb $K -- 1 5 3600000:60000
eq "bucket: 1 us before retry_after: still denied, retry 1 us" "0 1" "${R[0]} ${R[4]}"
clock 7260 0                  # exactly retry_after
cevb $K -- 5 5 3600000:60000
eq "bucket: at retry_after the whole limit is free" "1 0" "${R[0]} ${R[2]}"
eq "bucket: the expired bucket was trimmed" "7320000 5" "$(rcli HGETALL $K | xargs)"

# retry from bucket boundaries with cost: 2 units per minute for 4 minutes
K=clk:limit:b1:bcost
rcli DEL test:sorts >/dev/null
for m in 0 1 2 3; do clock $((36000 + m * 60)) 500000; cevb $K -- 2 8 600000:60000; done
eq "bucket cost: 8 of 8 in 4 buckets" "1 0 4" "${R[0]} ${R[2]} $(rcli HLEN $K)"
eq "bucket cost: admissions never order the buckets" "" "$(rcli HGET test:sorts n)"
clock 36200 0
cevb $K -- 5 8 600000:60000
# 5 units must leave: the 3rd bucket (ends 36180 s) frees the 6th: 36180 + 600 - 36200
eq "bucket cost: retry when enough buckets have left (580 s)" "0 580000000" "${R[0]} ${R[4]}"
eq "bucket cost: a denial orders them once" 1 "$(rcli HGET test:sorts n)"

# A clock stepped back over a bucket boundary: the key keeps living until
# the newest bucket (a later one than the current) leaves.
K=clk:limit:b1:back
clock 3600 0                  # bucket ends 3660 s
cevb $K -- 1 5 3600000:60000
eq "bucket TTL: bucket end + window - now + 1 ms" 3660001 "$(ttl_of $K)"
clock 3500 0                  # 100 s back: bucket ends 3540 s
cevb $K -- 1 5 3600000:60000
eq "bucket back: admitted into the earlier bucket, both count" "1 3 2" "${R[0]} ${R[2]} $(rcli HLEN $K)"
eq "bucket back: TTL from the newest bucket end (3660 s + 1 h - 3500 s + 1 ms)" 3760001 "$(ttl_of $K)"

# one bucketed and one exact window, all-or-nothing; a bucketed window after
# a config change from a log never meets the sorted set (b1 vs v1 key)
KB="clk:limit:b1:{mix}:1h" KL="clk:limit:v1:{mix}:10s"
clock 50000 0
cevb "$KL" "$KB" -- 2 3 10000 4 3600000:60000
eq "mixed: admitted into both" "1 1 0" "${R[0]} ${R[2]} ${R[5]}"
eq "mixed: zset and hash" "zset hash" "$(rcli TYPE "$KL") $(rcli TYPE "$KB")"
clock 50001 0
cevb "$KL" "$KB" -- 2 3 10000 4 3600000:60000
eq "mixed: 10s window denies (retry 9 s); nothing written in either" "0 0 9000000 1 1 2" \
	"${R[0]} ${R[5]} ${R[4]} $(rcli ZCARD "$KL") $(rcli HLEN "$KB") $(rcli HGET "$KB" 50040000)"
clock 50010 0
cevb "$KL" "$KB" -- 2 3 10000 4 3600000:60000
eq "mixed: 10s window free, 1h buckets hold 4: admitted" "1 0 1" "${R[0]} ${R[2]} ${R[5]}"
clock 50020 0
cevb "$KL" "$KB" -- 1 3 10000 4 3600000:60000
eq "mixed: 1h window denies until its bucket leaves (50040 + 3600 - 50020 s)" \
	"0 1 3620000000" "${R[0]} ${R[5]} ${R[4]}"

t_done
