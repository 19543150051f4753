-- sliding_window.lua - one rate-limit decision, atomically (sliding-window log).
--
-- KEYS[i]      one sorted set per window of the policy (score = Redis time, us)
-- ARGV[1]      cost: units this request consumes (>= 1)
-- ARGV[2i]     limit of window i        ARGV[2i+1]  length of window i, ms
--              or "<ms>:<precision ms>" for a bucketed window (KEYS[i] a hash)
--
-- A batch (redis-batch): ARGV[1] = "batch", ARGV[2] = number of decisions,
-- then per decision its key count, cost and limit/window pairs;
-- KEYS are the decisions' keys one after the other. Each is decided as if
-- alone, in order, at one Redis time; the reply is an array of per-decision
-- replies (an error element for a decision that failed: the others stand).
--
-- Returns { allowed 0|1, limit, remaining, reset_us, retry_after_us, index }
-- for the deciding window (0-based index): the least remaining when allowed,
-- the denying window with the longest retry when denied.
--
-- A pool (pool=, protocol 3): a decision whose last pair is <limit>
-- "pool:<ms>:<headroom>:<account>" has two more keys after its windows'
-- (so 2 * #KEYS - 1 arguments, or a batch decision of 2 * <key count>):
-- the pool's log, a sorted set as a window's whose members are
-- "<cum>:<cost>:<account>", and a hash account -> units of the log's
-- entries (trimming an entry takes its units off its account, a field at 0
-- goes). The decision admits only if every window and the pool admit, and
-- a refusal writes neither. The pool admits a cost when its count plus the
-- cost is at most its limit, or at most limit - headroom for an account
-- that already holds at least its share: mine * (n + 1) >= limit, n the
-- accounts holding units in the pool's window (HLEN after the trim), mine
-- this account's units there (none at all while the log is empty: a hash
-- left without its log goes with the next admission). Both are read exactly before the trim by
-- taking the expired entries' units off their accounts (no scan of
-- accounts: the expired entries only, which each trim then removes). The
-- reply has a 7th element: 0, or 1 (pool-full) / 2 (pool-share) when the
-- pool decides the denial (its retry the longest; its index the number of
-- windows), then limit, remaining and reset are the pool's: remaining
-- room under the rule that refused, retry when that much has left.
--
-- In-flight leases (inflight=, protocol 4): a window pair <n>
-- "lease:<lease ms>:<lease id>" (at most one per decision; the id 1..64
-- hex digits) is the account's leases, not a window: its key is a sorted
-- set, member = lease id, score = the lease's end (Redis time, us). A lease
-- counts while its end is after now. It admits when fewer than <n> leases
-- count, whatever the cost (one request, one slot); an admission adds this
-- request's lease (end = now + lease ms), trims the ended ones and sets the
-- TTL to the latest end, as a window's key (its window 0). All-or-nothing
-- with the windows and the pool as ever. Its reply, when it decides: limit
-- <n>, remaining <n> - count (less this lease when admitted), reset and
-- retry = until the earliest lease (the <need>th when several must end)
-- ends, an upper bound since a release comes first in most cases. It is
-- the deciding slot of an admission only when it is the only slot.
-- ARGV[1] = "release", ARGV[2] = a lease id, KEYS[1] = the leases: the
-- lease goes (ZREM), the ended ones too; reply { 1 (it was running) | 2
-- (it had ended already) | 0 (not there: released, trimmed, or never
-- taken), the leases still running }.
--
-- Reserve, then settle (settle=): a decision's last pair may
-- be 1 "settle:<ms>" (never with a pool), its key after the others' a
-- string, the reservation's record: an admission writes
-- "c<cost hex>" then "/<score>" per pair before it (its entry's score, a
-- lease's end; nothing for a token bucket), expiring after <ms>. ARGV[1] =
-- "settle", ARGV[2] = the real cost (0 or more), then the policy's window
-- pairs; KEYS = their keys, then the record: the record goes, and real -
-- reserved is charged (an entry of that cost at now) or refunded (taken
-- off the reservation's own entry while it is in the window, never below
-- zero; the entries after it keep the cum order) in each log window; a
-- token bucket's TAT moves by it (a refund never below now), when its
-- stored limit and window are the pair's. Reply { 1 settled | 0 no such
-- record (settled, ended or never made), real - reserved, limit,
-- remaining, reset, index }: the last four what the window with the least
-- left (a tie: the first) holds after it, as a decision would answer them
-- (reset 0 for an empty window); only the first two when a window cannot
-- be read so (a bucket written under another rate, a member not ours).
--
-- Rules: time is Redis's own (every agent shares one clock); an entry exactly
-- one window old is out; admission is all-or-nothing over the windows; a
-- denial writes nothing but the trims (a refused request does not count and
-- does not extend the TTL). An admission sets each key's TTL to cover its
-- newest entry or bucket end (whichever is later) plus the window, in ms
-- rounded up, plus 1 ms. Cost, limits, window lengths, precisions and a
-- batch's counts are whole numbers >= 1 (nan, inf, fractions: an error).
--
-- One entry per admitted request, whatever its cost, so neither Redis time
-- nor memory grows with cost. Its member "<cum>:<cost>" (hex) holds:
--   cum   units admitted into this key up to and including this entry, a
--         running total that restarts when the window empties;
--   cost  this entry's units.
-- Scores grow strictly within a key (an entry is stamped at Redis time, or
-- 1 us after the newest entry if that is later: same microsecond, clock
-- stepped back), so rank order is cum order. The window's count is then
-- cum(newest) - cum(oldest) + cost(oldest): two O(log n) reads, no walk, no
-- companion key. The members are unique (cum grows strictly within a key).
-- A key whose oldest in-window or newest entry has another kind of member
-- is not ours: its decision is an error ('bad entry') and writes nothing.
--
-- Bucketed windows (precision=): KEYS[i] is a hash, field = end of a
-- bucket of <precision> ms of Redis time (epoch-aligned, decimal ms), value
-- = units admitted in it. A bucket counts while its end is after the cut:
-- every bucket that overlaps the window, the partly expired oldest one
-- included. Each admission in it is then counted at least as long as the
-- log would count it (its time < the bucket's end), so the window never
-- holds more than its limit; the price is under-admission by at most one
-- bucket for at most one bucket's time. Fields hold their own end, so a
-- change of precision or window length never misreads them. Memory is one
-- field per bucket (window / precision), whatever the limit or the cost.
--
-- Out of memory: the first write of an admission is a ZADD (a HINCRBY for
-- a bucketed window), which Redis refuses with an OOM error when over
-- maxmemory (noeviction), and nothing has been written before it: counting
-- only reads, trims come after. (A script's first write is the only one
-- Redis checks for OOM; a trim first would let the ZADD through.) No
-- "#!lua" shebang: Redis 6 cannot load one.
--
-- Redis pays for every decision once per fleet, so the code below avoids
-- what Lua makes expensive here: a decision makes no table but its reply
-- (window state lives in one table per window index, reused by every
-- decision of the call; a bucketed window adds one for its expired fields
-- when it has some, and two to order its buckets when it denies); ARGV's
-- numbers are converted once per call (tonumber() of a string is two
-- strtod()s, and a batch's decisions mostly share a policy) and each score
-- once ('+ 0'); numbers reach Redis
-- as strings the script formats itself (Lua's own conversion is a %.14g
-- printf that would round a microsecond timestamp); and a batch is decided
-- in place (each decision reads its slice of KEYS and ARGV by offset).

local t = redis.call('TIME')
local call, format, match = redis.call, string.format, string.match
local now = t[1] * 1000000 + t[2]

-- Exact decimal for an integer-valued number below 2^63 ('%d' converts
-- through an integer: neither rounds, and it is cheaper than '%.0f').
local function int(x)
	return format('%d', x)
end
local nows = int(now)

-- ARGV's numbers, all counts, memoized for the call: the whole number >= 1
-- that <s> is, or false (not a number, nan, inf, a fraction, below 1, or
-- no such argument). The test is written so that nan fails it ('v < 1'
-- would let it through).
local NUM = {}
local function num(s)
	if s == nil then return false end
	local v = NUM[s]
	if v == nil then
		v = tonumber(s)
		if not (v and v >= 1 and v % 1 == 0) then v = false end
		NUM[s] = v
	end
	return v
end

-- PEXPIRE's argument for the last window length seen whose newest entry
-- was stamped at now (see the TTL in decide): a batch's decisions mostly
-- share a policy.
local ttl_win, ttl_now = false, false

-- cum and cost of member <m> (of a pool's log when <pool>, then its
-- account too); nil for a member this script never writes.
local function parse(m, pool)
	local c, k, a
	if pool then c, k, a = match(m, '^(%x+):(%x+):(.+)$') else c, k = match(m, '^(%x+):(%x+)$') end
	if c then return tonumber(c, 16), tonumber(k, 16), a end
	return nil
end

-- A hash field as a count: its integer value, 0 for none or another.
local function hnum(v)
	local x = tonumber(v)
	if x and x % 1 == 0 then return x end
	return 0
end

-- The decision being made: slot[i] is window i's state, overwritten by
-- the next decision of the call (a table per window index, not per
-- decision).
--   limit, win (ms), prec (ms, or false for a log), cut (us: an entry at
--   or before it is out), cuts (cut as a string), key
--   count   units in the window
--   cum     cum of the newest entry (log; 0 when the window is empty)
--   top     score of the newest entry (log), end of the newest counted
--           bucket (bucketed), or false
--   oldest  score of the oldest in-window entry, or end of the oldest
--           counted bucket; false when the window is empty
--   first   cost of the oldest in-window entry (log)
--   h       the hash as HGETALL gave it (bucketed)
--   dead    fields to trim (bucketed), or false
--   score   score (log) or bucket end (bucketed) of this admission, us
local slot = {}

-- Bucketed window <s>, read only: the buckets that end after the cut
-- count; the others (ended, or not ours) are dead. Only the sum and the
-- oldest and newest ends: the order of the buckets is a denial's concern
-- (retry_buckets), so an admission builds no table per bucket.
local function read_buckets(s)
	local h = call('HGETALL', s.key)
	local n, lo, hi, d = 0, false, false, false
	for j = 1, #h, 2 do
		local e, v = tonumber(h[j]), tonumber(h[j + 1])
		if e and v and e * 1000 > s.cut then
			e = e * 1000
			n = n + v
			if not lo or e < lo then lo = e end
			if not hi or e > hi then hi = e end
		else
			if not d then d = {} end
			d[#d + 1] = h[j]
		end
	end
	s.count, s.h, s.dead, s.oldest, s.top = n, h, d, lo, hi
end

-- Time until <need> units have left bucketed window <s>: a bucket leaves
-- when the cut reaches its end, one window after it. Never early.
local function retry_buckets(s, need, win_us)
	local h, ends, units = s.h, {}, {}
	for j = 1, #h, 2 do
		local e, v = tonumber(h[j]), tonumber(h[j + 1])
		if e and v and e * 1000 > s.cut then
			if units[e] then
				units[e] = units[e] + v
			else
				ends[#ends + 1], units[e] = e, v
			end
		end
	end
	table.sort(ends)
	local acc = 0
	for j = 1, #ends do
		acc = acc + units[ends[j]]
		if acc >= need then return ends[j] * 1000 + win_us - now end
	end
	return win_us
end

-- Trims a batch holds back until every decision of it has tried its first
-- write (nil outside a batch): Redis checks a script's writes against
-- maxmemory only until the script has written once, so one decision's trim
-- must not let a later decision's admission past that check. Held as
-- pairs: the key, then the cut string (log) or the dead fields (bucketed).
local held = nil

-- A pool's trim: its log's expired entries <e> (nil: read here, so that a
-- batch's held trims of one pool take each entry off once) go, and their
-- units off their accounts in <hkey> (a count at 0 or below: the field
-- goes), in the order the accounts first appear.
local function trim_pool(key, hkey, cuts, e)
	e = e or call('ZRANGEBYSCORE', key, '-inf', cuts)
	if not e[1] then return end
	local dec, order = {}, {}
	for j = 1, #e do
		local _, k, a = parse(e[j], true)
		if a then
			if not dec[a] then dec[a], order[#order + 1] = 0, a end
			dec[a] = dec[a] + k
		end
	end
	call('ZREMRANGEBYSCORE', key, '-inf', cuts)
	for j = 1, #order do
		local a = order[j]
		local v = hnum(call('HGET', hkey, a)) - dec[a]
		if v > 0 then call('HSET', hkey, a, int(v)) else call('HDEL', hkey, a) end
	end
end

-- Drop the expired entries or buckets of <key> (after the first write):
-- <what> is a cut string (log), a list of dead fields (bucketed) or
-- { hkey, cuts } (a pool).
local function trim(key, what)
	if held then
		held[#held + 1] = key
		held[#held + 1] = what
	elseif type(what) == 'string' then
		call('ZREMRANGEBYSCORE', key, '-inf', what)
	elseif what.pool then
		trim_pool(key, what.pool, what.cuts)
	else
		call('HDEL', key, unpack(what))
	end
end

-- PEXPIRE <key> <ttl>: every expiry the script sets, in one place.
local function expire(key, ttl)
	call('PEXPIRE', key, ttl)
end

-- Log window <s>, read only (see slot above). False when an end of the
-- window holds a member that is not ours.
local function read_window(s)
	local key = s.key
	s.count, s.cum, s.top, s.oldest, s.first = 0, 0, false, false, false
	local a = call('ZRANGEBYSCORE', key, '(' .. s.cuts, '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
	if not a[1] then return true end
	local b = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
	local c1, k1 = parse(a[1], s.pool)
	local c2 = parse(b[1], s.pool)
	if not (c1 and c2) then return false end
	-- (scores are numeric strings: '+ 0' converts once, tonumber() twice)
	s.oldest, s.top = a[2] + 0, b[2] + 0
	s.count, s.cum, s.first = c2 - c1 + k1, c2, k1
	return true
end

-- Member and score of rank <r> of <key>.
local function at(key, r)
	local rs = int(r)
	local x = call('ZRANGE', key, rs, rs, 'WITHSCORES')
	return x[1], x[2] + 0
end

-- Time until <need> units have left log window <s> (after its trim, so
-- rank 0 is the oldest in-window entry; in a batch, after the expired
-- ones): when the entry whose leaving frees the <need>th unit leaves, by
-- a binary search on cum. Never early: an entry leaves exactly one window
-- after its score.
local function retry_for(s, need, win_us)
	-- the usual case (cost 1 on a full window): the oldest is enough
	if s.first >= need then return s.oldest + win_us - now end
	-- In a batch the trim is held back: rank <skip> is the oldest in-window.
	-- (Counted with ZRANGEBYSCORE, not ZCOUNT, to stay within the command set
	-- of the documented ACL: the entries that left since this key's last
	-- decision, few on a key busy enough to be denied.)
	local key, skip = s.key, 0
	if held then skip = #call('ZRANGEBYSCORE', key, '-inf', s.cuts) end
	local base = s.count - s.cum   -- cum of the entry before the oldest, negated
	local lo, hi = skip, call('ZCARD', key) - 1
	while lo < hi do
		local mid = math.floor((lo + hi) / 2)
		-- (a member not ours in the middle reads as cum 0: the search goes
		-- past it, later, never early)
		local c = parse((at(key, mid)), s.pool) or 0
		if c + base >= need then hi = mid else lo = mid + 1 end
	end
	local _, sc = at(key, lo)
	return sc + win_us - now
end

local BAD_ARGS = 'ERR sliding_window: bad arguments'
local BAD_WINDOW = 'ERR sliding_window: bad limit or window'
local BAD_BATCH = 'ERR sliding_window: bad batch'
local BAD_ENTRY = 'ERR sliding_window: bad entry'

-- GCRA (algorithm=gcra): the token bucket as one time per account.
-- A decision of one window whose length argument is "gcra:<ms>:<burst>":
-- rate <limit> per <ms>, emission interval T = ms / limit, capacity
-- <burst> (requests of cost 1 that pass at once from empty). KEYS[1] is a
-- string "<tat>:<frac>": the theoretical arrival time TAT = tat +
-- frac / limit us (Redis time), 0 <= frac < limit, so that T is exact
-- whatever it is (1s / 3 is 333333 + 1/3 us): every quantity below is a
-- whole number of us, or of 1/limit us ("scaled"), and each below 2^53
-- (burst * ms * 1000 <= 2^52 is checked), so that this script's doubles
-- and the module's int64 compute the same bits.
--   allow iff max(TAT, now) + cost * T - now <= burst * T;
--   then TAT' = max(TAT, now) + cost * T, stored with a TTL of TAT' - now
--   in ms rounded up, plus 1 ms (as a log window's: PEXPIRE counts from
--   Redis's ms snapshot); a denial writes nothing.
-- Reply: { allowed, burst, remaining = floor((burst * T - (TAT' - now)) /
-- T) (TAT on a denial), reset = TAT' - now (TAT on a denial) rounded up to
-- a us: when the bucket is full again, retry = max(TAT, now) + cost * T -
-- burst * T - now rounded up to a us, 0 }. A cost above the burst never
-- passes: denied, retry = the whole bucket's time (burst * T).
-- A stored frac >= limit (the limit changed) reads as the next us.
-- A change of rate or burst (reload, override, its expiry): an admission
-- stores "<tat>:<frac>:<ms>:<limit>:<owed>", the rate it was decided under
-- and the us owed at that write (owed + frac / limit; the write was at tat
-- - owed). Read under the same rate and burst it is the TAT above. Under
-- another, the bucket is read as if the current rate and burst had held
-- since that write: the units owed then, (owed + frac / limit) / T_old, at
-- most the current burst, become units of the current T, rounded up (a
-- change never frees a part of a unit), and drain from the write's time.
-- The debt is then never more than a full bucket of the current policy,
-- and no interval admits more than the looser of the two rates with the
-- larger burst would. The value keeps its TTL (when the old rate drained
-- it): then the bucket is empty, as the old rate would have it. The 2-field
-- form (written before this) reads as the TAT under the current rate, as
-- ever. A value of the 5-field form with a rate out of bounds, owed > tat,
-- or written more than 2^52 us after now is a bad entry.
local GCRA_MAX = 4503599627370496   -- 2^52

-- The settle pair (see the header) of a decision of <n> pairs, its last:
-- { key, ms }, false (none), or nil (a malformed one).
local function settle_args(k0, a0, n)
	local ms = match(ARGV[a0 + 1 + 2 * n] or '', '^settle:(%d+)$')
	if not ms then return false end
	ms = num(ms)
	if not (ms and ms <= 1e12 and num(ARGV[a0 + 2 * n])) then return nil end
	return { key = KEYS[k0 + n], ms = ms }
end

-- An admission's reservation record (of <cost>, its <n> pairs' scores).
local function settle_write(rec, cost, n)
	local v = format('c%x', cost)
	for i = 1, n do v = v .. '/' .. int(slot[i].score) end
	call('SET', rec.key, v)
	expire(rec.key, int(rec.ms))
end
local floor = math.floor
-- (a calendar quota beside a bucket: defined with the quotas, below)
local quota_arg, read_quota

-- q, r of a / b, whole, 0 <= a <= 2^52, 1 <= b <= 10^15: exact in
-- doubles (a / b = q + r / b could round up to q + 1 only if b * (q + 1)
-- exceeded 2^53, and it is at most a + b).
local function divmod(a, b)
	local q = floor(a / b)
	return q, a - q * b
end

-- ceil(a * b / c), 0 <= a < c <= 10^15, 0 <= b <= 2^52, exact in doubles:
-- b's bits from the top, the partial product kept as q * c + r (r < c).
local function muldiv_up(a, b, c)
	local q, r, bit = 0, 0, 1
	while bit * 2 <= b do bit = bit * 2 end
	while bit >= 1 do
		q, r = q * 2, r * 2
		if b >= bit then b, r = b - bit, r + a end
		while r >= c do q, r = q + 1, r - c end
		bit = bit / 2
	end
	if r > 0 then q = q + 1 end
	return q
end

local function gcra(k0, a0, n, rec)
	local cost = num(ARGV[a0 + 1])
	if not cost then return redis.error_reply(BAD_ARGS) end
	local l = num(ARGV[a0 + 2])
	local ms, bs = match(ARGV[a0 + 3], '^gcra:(%d+):(%d+)$')
	local w, b = num(ms), num(bs)
	-- a calendar quota may stand beside the bucket: a second window "cal:..."
	local q = n == 2 and quota_arg(k0, a0, 2)
	if not (n == 1 or q) or not (l and w and b) or l > 1e15 or b * w * 1000 > GCRA_MAX then
		return redis.error_reply(BAD_WINDOW)
	end
	w = w * 1000
	local key = KEYS[k0 + 1]
	-- d + f / l: max(TAT, now) - now
	local d, f = 0, 0
	local bw = b * w
	local v = call('GET', key)
	if v then
		local ts, fs, ms1, ls1, os1 = match(v, '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
		if not ts then ts, fs = match(v, '^(%d+):(%d+)$') end
		local t, fr = tonumber(ts), tonumber(fs)
		if not (t and t <= 9007199254740992 and fr <= 9007199254740992) then
			return redis.error_reply(BAD_ENTRY)
		end
		if ms1 then
			-- (the rate it was written under; see the header)
			local w1, l1, o = tonumber(ms1), tonumber(ls1), tonumber(os1)
			if not (w1 >= 1 and w1 <= 1e12 and l1 >= 1 and l1 <= 1e15 and o <= t and
			        t - o - now <= GCRA_MAX) then
				return redis.error_reply(BAD_ENTRY)
			end
			-- e: the write's time from now (e + o is exact where a time is not)
			local e = t - o - now
			if fr >= l1 then o, fr = o + 1, 0 end
			if w1 * 1000 == w and l1 == l then
				-- the same rate: what the general case gives, cheaper (o * l
				-- may be inexact above 2^53, never on the wrong side of bw)
				if o * l + fr > bw then o, fr = divmod(bw, l) end
			else
				w1 = w1 * 1000
				-- q + r / w1: the units owed at the write, at most the burst
				local q, r = b, 0
				if o <= divmod(GCRA_MAX, l1) then q, r = divmod(o * l1 + fr, w1) end
				local x = bw
				if q < b then x = q * w + muldiv_up(r, w, w1) end
				o, fr = divmod(x, l)
			end
			if e + o >= 0 then d, f = e + o, fr end
		else
			if fr >= l then t, fr = t + 1, 0 end
			if t >= now then d, f = t - now, fr end
		end
	end
	if q and not read_quota(q) then return redis.error_reply(BAD_ENTRY) end
	-- the quota's refusal: its units leave at the end that counts them
	local qdeny = q and q.count + cost > q.limit and
	              { 0, q.limit, math.max(0, q.limit - q.count), q.oldest - now, q.oldest - now, 1 }
	local retry
	if cost <= b then
		-- admitted iff d + f / l <= (burst - cost) * w / l
		local qx, rx = divmod((b - cost) * w, l)
		if d < qx or (d == qx and f <= rx) then
			local qc, rc = divmod(cost * w, l)
			d, f = d + qc, f + rc
			if f >= l then d, f = d + 1, f - l end
			local reset = d
			if f > 0 then reset = d + 1 end
			-- (admitted by the bucket, refused by the quota: nothing written)
			if qdeny then return qdeny end
			local ttl = int(divmod(reset + 999, 1000) + 1)
			call('SET', key, format('%d:%d:%d:%d:%d', now + d, f, w / 1000, l, d), 'PX', ttl)
			local rem = divmod(bw - d * l - f, w)
			if rec then settle_write(rec, cost, 0) end
			if q then
				call('SET', q.key, int(q.score) .. ':' .. int(q.count + cost))
				expire(q.key, int(1 + math.ceil((q.score - now) / 1000)))
				-- the quota decides when it has less left (a tie: the bucket)
				if q.limit - q.count - cost < rem then
					return { 1, q.limit, q.limit - q.count - cost, q.score - now, 0, 1 }
				end
			end
			return { 1, b, rem, reset, 0, 0 }
		end
		retry = d - qx
		if f > rx then retry = retry + 1 end
	end
	local qb, rb = divmod(bw, l)
	if not retry then
		-- a cost above the burst never fits: the whole bucket's time
		retry = qb
		if rb > 0 then retry = qb + 1 end
	end
	local rem, reset = 0, d
	if f > 0 then reset = d + 1 end
	if d < qb or (d == qb and f <= rb) then rem = divmod(bw - d * l - f, w) end
	-- both refuse: the longer retry decides (a tie: the bucket)
	if qdeny and qdeny[5] > retry then return qdeny end
	return { 0, b, rem, reset, retry, 0 }
end

-- Leases <s> (see the header), read only: the running ones, their count,
-- the earliest and latest ends.
local function read_leases(s)
	local a = call('ZRANGEBYSCORE', s.key, '(' .. nows, '+inf', 'WITHSCORES')
	s.live, s.count, s.oldest, s.top = a, #a / 2, false, false
	if a[1] then s.oldest, s.top = a[2] + 0, a[#a] + 0 end
end

-- Is <s> a pool's length argument ("pool:...")?
local function is_pool(s)
	return s ~= nil and s:sub(1, 5) == 'pool:'
end

-- The pool of the decision being made (see the header), reused.
local pool = { pool = true }

-- The pool's pair of a decision of <n> windows (after theirs; its keys
-- after theirs) into <pool>. False: bad arguments.
local function pool_args(k0, a0, n)
	local P = pool
	local l = num(ARGV[a0 + 2 + 2 * n])
	local ms, hs, acc = match(ARGV[a0 + 3 + 2 * n], '^pool:(%d+):(%d+):(.+)$')
	local w, h = num(ms), tonumber(hs)
	if not (l and w and h and h < l and #acc <= 1024) then return false end
	P.key, P.hkey, P.limit, P.win, P.head, P.acc = KEYS[k0 + n + 1], KEYS[k0 + n + 2], l, w, h, acc
	P.cut = now - w * 1000
	P.cuts = int(P.cut)
	P.trims = { pool = P.hkey, cuts = P.cuts }
	return true
end

-- Reads the pool for <cost>: its log as a window's, then this account's
-- units and the accounts holding units, as they are once the expired
-- entries are gone, then the room the rule gives. False: a bad entry.
local function read_pool(cost)
	local P = pool
	local l, h, acc = P.limit, P.head, P.acc
	if not read_window(P) then return false end
	local e = call('ZRANGEBYSCORE', P.key, '-inf', P.cuts)
	local dec = {}
	for j = 1, #e do
		local _, k, a = parse(e[j], true)
		if a then dec[a] = (dec[a] or 0) + k end
	end
	-- An empty log: nobody holds units, whatever the hash says (one left
	-- behind, the log deleted by hand, goes with this pool's next admission).
	P.orphan = not P.oldest and not e[1]
	local mine, na = 0, 0
	if not P.orphan then
		mine = hnum(call('HGET', P.hkey, acc)) - (dec[acc] or 0)
		na = call('HLEN', P.hkey)
		for a, k in pairs(dec) do
			local v = call('HGET', P.hkey, a)
			if v and hnum(v) - k <= 0 then na = na - 1 end
		end
	end
	P.expired, P.gone, P.dec, P.na = e[1] ~= nil, e, dec, na
	-- (exact in doubles: a product beyond 2^53 is beyond any limit)
	if mine * (na + 1) >= l then
		P.room, P.code = l - h, 2
	else
		P.room, P.code = l, 1
	end
	P.mine = mine
	P.admits = P.count + cost <= P.room
	return true
end

-- pool-share's exact retry: the first time, as the pool's entries leave
-- (oldest first, those of one score at once), at which the account is
-- below its share (mine * (n + 1) < limit) and the cost fits in the whole
-- pool, walked no further than <hi> (the score at which the cost fits
-- outside the headroom; false: the whole log). Nil when that comes first
-- or never. Each account's units are its field, less what the held trim
-- of a batch still owes it; the work is the entries walked, at most
-- headroom + cost of them when <hi> is given.
local function retry_share(P, cost, hi, w)
	local e = call('ZRANGEBYSCORE', P.key, '(' .. P.cuts, hi and int(hi) or '+inf', 'WITHSCORES')
	local sub = held and P.dec or {}
	local units, n, l, cnt = {}, P.na, P.limit, P.count
	local j = 1
	while j <= #e do
		local sc = e[j + 1] + 0
		while j <= #e and e[j + 1] + 0 == sc do
			local c, k, a = parse(e[j], true)
			if a then
				local u = units[a] or hnum(call('HGET', P.hkey, a)) - (sub[a] or 0)
				if u > 0 and u - k <= 0 and n > 0 then n = n - 1 end
				units[a], cnt = u - k, P.cum - c
			end
			j = j + 2
		end
		local mine = units[P.acc] or P.mine
		if cnt + cost <= l and mine * (n + 1) < l then return sc + w - now end
	end
	return nil
end

-- One decision over the <n> windows KEYS[k0 + i]: its cost is ARGV[a0 + 1],
-- window i's limit and length ARGV[a0 + 2i] and ARGV[a0 + 1 + 2i] (the
-- script's own arguments: k0 = a0 = 0; or its slice of a batch); with
-- <pooled>, its pool's pair and keys follow.
-- Calendar quotas (protocol 4): a window whose length argument is
-- "cal:<kind>:<tz>:<anchor>" counts the units admitted in the current
-- period of the calendar of a fixed UTC offset of <tz> minutes (-840..840):
-- kind h (the hour), d (the day from 00:00), w (the week from Monday
-- 00:00) or m (the month from day <anchor> 00:00, 1..28). Its key is a
-- string "<end>:<units>": the units admitted in the period that ends at
-- <end> (us, Redis time); they count while end > now, then none do (the
-- last microsecond of a period is in it, the next is not). An admission
-- stores "<end>:<units + cost>" with <end> the current period's end, or the
-- stored one when that is later (a change of tz or anchor never ends a
-- count early: the stored units count until their own end, whichever
-- period holds now), with a TTL as a GCRA value's: end - now in ms rounded
-- up, plus 1 ms. A denial writes nothing. Its reset (and retry when it
-- refuses) is the time until the units it counts are released: the stored
-- end, else the period's; an admission's reset is the end it wrote. The
-- dates are Hinnant's days_from_civil and civil_from_days.
local function days_from_civil(y, m, d)
	if m <= 2 then y = y - 1 end
	local era = floor(y / 400)
	local yoe = y - era * 400
	local mp = m - 3
	if m <= 2 then mp = m + 9 end
	local doy = floor((153 * mp + 2) / 5) + d - 1
	local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
	return era * 146097 + doe - 719468
end

local function civil_from_days(z)
	z = z + 719468
	local era = floor(z / 146097)
	local doe = z - era * 146097
	local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
	local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
	local mp = floor((5 * doy + 2) / 153)
	local d = doy - floor((153 * mp + 2) / 5) + 1
	local m = mp - 9
	if mp < 10 then m = mp + 3 end
	local y = yoe + era * 400
	if m <= 2 then y = y + 1 end
	return y, m, d
end

local US_DAY = 86400000000

-- [start, end) in us of the period of <kind> under offset <tz> minutes and
-- <anchor> that holds now.
local function cal_period(kind, tz, anchor)
	local off = tz * 60000000
	local loc = now + off
	if kind == 'h' then
		local st = floor(loc / 3600000000) * 3600000000 - off
		return st, st + 3600000000
	end
	local day = floor(loc / US_DAY)
	if kind == 'd' then
		return day * US_DAY - off, (day + 1) * US_DAY - off
	elseif kind == 'w' then
		-- 1970-01-01 was a Thursday: (day + 3) mod 7 days since Monday
		day = day - (day + 3) % 7
		return day * US_DAY - off, (day + 7) * US_DAY - off
	end
	local y, m, d = civil_from_days(day)
	if d < anchor then
		m = m - 1
		if m < 1 then m, y = 12, y - 1 end
	end
	local st = days_from_civil(y, m, anchor) * US_DAY - off
	m = m + 1
	if m > 12 then m, y = 1, y + 1 end
	return st, days_from_civil(y, m, anchor) * US_DAY - off
end

-- Window <i> of the decision at KEYS[k0 + i], ARGV[a0 + 2i] as a quota
-- ("cal:..." and its limit) into slot[i]; false when it is not one.
function quota_arg(k0, a0, i)
	local s = slot[i]
	if not s then s = {}; slot[i] = s end
	local ck, ctz, can = match(ARGV[a0 + 1 + 2 * i] or '', '^cal:([hdwm]):(%-?%d+):(%d+)$')
	local l = num(ARGV[a0 + 2 * i])
	ctz, can = tonumber(ctz), tonumber(can)
	if not (ck and l and ctz >= -840 and ctz <= 840 and can >= 1 and can <= 28) then return false end
	s.cal, s.tz, s.anchor, s.key, s.limit, s.win, s.prec = ck, ctz, can, KEYS[k0 + i], l, 0, false
	return s
end

-- Quota window <s> (s.cal, s.tz, s.anchor), read only: s.count, s.oldest
-- (when its units are released) and s.score (the end an admission
-- writes). False: a bad entry.
function read_quota(s)
	local _, e = cal_period(s.cal, s.tz, s.anchor)
	s.count, s.oldest, s.score, s.top = 0, e, e, false
	local v = call('GET', s.key)
	if not v then return true end
	local es, us = match(v, '^(%d+):(%d+)$')
	local ve, vu = tonumber(es), tonumber(us)
	if not (ve and ve <= 9007199254740992 and vu <= 9007199254740992) then return false end
	if ve > now then
		s.count, s.oldest = vu, ve
		if ve > e then s.score = ve end
	end
	return true
end

local function decide(k0, a0, n, pooled)
	local cost = num(ARGV[a0 + 1])
	local rec = false
	if not pooled and n > 1 then
		rec = settle_args(k0, a0, n)
		if rec == nil then return redis.error_reply(BAD_WINDOW) end
		if rec then n = n - 1 end
	end
	if match(ARGV[a0 + 3] or '', '^gcra:') then
		-- (a token bucket has no pool)
		if pooled and cost then return redis.error_reply(BAD_WINDOW) end
		if not pooled then return gcra(k0, a0, n, rec) end
	end
	if not cost then return redis.error_reply(BAD_ARGS) end
	if pooled and not pool_args(k0, a0, n) then return redis.error_reply(BAD_WINDOW) end
	local allowed, leased = true, false
	for i = 1, n do
		local s = slot[i]
		if not s then s = {}; slot[i] = s end
		local ws = ARGV[a0 + 1 + 2 * i]
		local l, w, p = num(ARGV[a0 + 2 * i]), num(ws), false
		s.lease = false
		local ck, ctz, can = match(ws or '', '^cal:([hdwm]):(%-?%d+):(%d+)$')
		s.cal = false
		if ck then
			ctz, can = tonumber(ctz), tonumber(can)
			if ctz >= -840 and ctz <= 840 and can >= 1 and can <= 28 then
				s.cal, s.tz, s.anchor, w = ck, ctz, can, 0
			end
		elseif not w then
			local wm, pm = match(ws, '^(%d+):(%d+)$')
			w, p = tonumber(wm), tonumber(pm)
			if not (p and p >= 1 and w >= 1) then w = false end
		end
		if not w and not leased then
			-- (a lease pair: the window 0, so that the TTL below is a window's)
			local lm, id = match(ws, '^lease:(%d+):(%x+)$')
			lm = num(lm)
			if lm and lm <= 1e12 and #id <= 64 then
				w, p, leased, s.lease, s.lms, s.id = 0, false, true, true, lm, id
			end
		end
		if not (l and w) then
			return redis.error_reply(BAD_WINDOW)
		end
		-- Inclusive bound: score <= now - window is out, so an entry exactly
		-- one window old does not count (a lease: an end at now is over).
		s.key, s.limit, s.win, s.prec = KEYS[k0 + i], l, w, p
		s.cut = now - w * 1000
		s.cuts = int(s.cut)
		s.unit = cost
		if s.lease then
			read_leases(s)
			s.unit = 1
		elseif s.cal then
			if not read_quota(s) then return redis.error_reply(BAD_ENTRY) end
		elseif p then
			read_buckets(s)
		elseif not read_window(s) then
			return redis.error_reply(BAD_ENTRY)
		end
		if s.count + s.unit > l then allowed = false end
	end
	if pooled then
		if not read_pool(cost) then return redis.error_reply(BAD_ENTRY) end
		if not pool.admits then allowed = false end
	end

	local best, best_rem, best_reset, best_retry
	local code = 0
	if allowed then
		for i = 1, n do
			local s = slot[i]
			if s.lease then
				s.score = now + s.lms * 1000
				call('ZADD', s.key, int(s.score), s.id)
			elseif s.cal then
				call('SET', s.key, int(s.score) .. ':' .. int(s.count + cost))
			elseif s.prec then
				-- The bucket of <now>: score = its end (us), where it leaves.
				local e = (math.floor(math.floor(now / 1000) / s.prec) + 1) * s.prec
				s.score = e * 1000
				call('HINCRBY', s.key, int(e), cost)
			else
				-- Above the newest entry, so that rank order stays cum order (a
				-- later stamp only makes this entry live longer, never shorter).
				local sc = now
				if s.top and s.top >= now then sc = s.top + 1 end
				s.score = sc
				call('ZADD', s.key, sc == now and nows or int(sc), format('%x:%x', s.cum + cost, cost))
			end
		end
		if pooled then
			local P = pool
			local sc = now
			if P.top and P.top >= now then sc = P.top + 1 end
			P.score = sc
			call('ZADD', P.key, int(sc), format('%x:%x:%s', P.cum + cost, cost, P.acc))
			if P.orphan then
				call('DEL', P.hkey)
				call('HSET', P.hkey, P.acc, int(cost))
			else
				call('HSET', P.hkey, P.acc, int(hnum(call('HGET', P.hkey, P.acc)) + cost))
			end
		end
		if rec then settle_write(rec, cost, n) end
		for i = 1, n do
			local s = slot[i]
			if s.cal then
				-- (nothing to trim: its TTL below is its end's, s.win 0)
			elseif not s.prec then trim(s.key, s.cuts) elseif s.dead then trim(s.key, s.dead) end
			-- The key lives until its newest entry or bucket leaves: its score
			-- (or, after a clock step back, a later bucket's end) plus one
			-- window, rounded up to a ms, plus 1 ms: PEXPIRE counts from
			-- Redis's time snapshot of the command, in whole ms and taken
			-- before TIME gave <now>, so up to 1 ms behind it.
			local last, ttl = s.score, nil
			if s.top and s.top > last then last = s.top end
			if last == now then
				if s.win ~= ttl_win then ttl_win, ttl_now = s.win, int(s.win + 1) end
				ttl = ttl_now
			else
				ttl = int(s.win + 1 + math.ceil((last - now) / 1000))
			end
			expire(s.key, ttl)
			local rem = s.limit - s.count - s.unit
			-- (the leases decide an admission only alone: the headers tell
			-- the rate)
			if (not best or rem < best_rem) and (n == 1 or not s.lease) then
				best, best_rem = i, rem
			end
		end
		if pooled then
			-- (the log's TTL as a window's; the hash lives as long)
			-- (at once, even in a batch: this admission wrote first, and a
			-- later decision then finds nothing expired to read)
			local P = pool
			if P.expired then trim_pool(P.key, P.hkey, P.cuts, P.gone) end
			-- (its entry is the newest: stamped above the newest before it)
			local ttl = int(P.win + 1 + math.ceil((P.score - now) / 1000))
			expire(P.key, ttl)
			expire(P.hkey, ttl)
		end
		-- reset: when the oldest in-window entry or bucket (perhaps the new
		-- one) leaves.
		local s = slot[best]
		if s.cal then
			best_reset = s.score - now
		else
			best_reset = (s.oldest or s.score) + s.win * 1000 - now
		end
		best_retry = 0
	else
		for i = 1, n do
			local s = slot[i]
			if s.cal then
				-- (a quota has nothing to trim)
			elseif not s.prec then trim(s.key, s.cuts) elseif s.dead then trim(s.key, s.dead) end
		end
		if pooled and pool.expired then trim(pool.key, pool.trims) end
		for i = 1, n do
			local s = slot[i]
			local need = s.count + s.unit - s.limit
			if need > 0 then
				local w = s.win * 1000
				-- cost > limit never fits: answer a whole window rather than loop.
				local retry = w
				if s.lease then
					retry = s.live[2 * need] - now
				elseif s.cal then
					-- a quota's units leave together, at the end that counts them
					retry = s.oldest - now
				elseif need <= s.count and s.prec then
					retry = retry_buckets(s, need, w)
				elseif need <= s.count then
					retry = retry_for(s, need, w)
				end
				if not best or retry > best_retry then
					best, best_retry = i, retry
				end
			end
		end
		-- the pool, when it refuses, after the windows: it decides only
		-- with a longer retry (need: the units that must leave it)
		if pooled and not pool.admits then
			local P = pool
			local need, w = P.count + cost - P.room, P.win * 1000
			local retry = w
			if need <= P.count then retry = retry_for(P, need, w) end
			if P.code == 2 then
				local hi = false
				if need <= P.count then hi = retry + now - w end
				retry = retry_share(P, cost, hi, w) or retry
			end
			if not best or retry > best_retry then
				best, best_retry, code = n + 1, retry, P.code
			end
		end
		local s, room = slot[best], 0
		if code ~= 0 then s, room = pool, pool.room else room = s.limit end
		local w = s.win * 1000
		best_rem = room - s.count
		if best_rem < 0 then best_rem = 0 end
		if s.oldest then best_reset = s.oldest + w - now else best_reset = w end
	end

	local lim
	if code ~= 0 then lim = pool.limit else lim = slot[best].limit end
	if pooled then
		return { allowed and 1 or 0, lim, best_rem, best_reset, best_retry, best - 1, code }
	end
	return { allowed and 1 or 0, lim, best_rem, best_reset, best_retry, best - 1 }
end

-- What log window <s> (key, win, limit set) leaves after a settle:
-- remaining (at least 0) and reset (until its oldest unit leaves; 0 when
-- empty), or nil when it holds a member that is not ours.
local function state_log(s)
	s.cut = now - s.win * 1000
	s.cuts = int(s.cut)
	if not read_window(s) then return nil end
	local reset = 0
	if s.oldest then reset = s.oldest + s.win * 1000 - now end
	return math.max(0, s.limit - s.count), reset
end

-- Settle <delta> units in log window <s> (key, win, limit set) whose
-- reservation entry has score <sc> (nil: none). False: a bad entry
-- (nothing written).
local function settle_log(s, delta, sc)
	s.cut = now - s.win * 1000
	s.cuts = int(s.cut)
	if delta == 0 then return true end
	if not read_window(s) then return false end
	if delta > 0 then
		local at = now
		if s.top and s.top >= now then at = s.top + 1 end
		call('ZADD', s.key, int(at), format('%x:%x', s.cum + delta, delta))
		call('ZREMRANGEBYSCORE', s.key, '-inf', s.cuts)
		expire(s.key, int(s.win + 1 + math.ceil((at - now) / 1000)))
		return true
	end
	-- a refund: from the reservation's own entry, while in the window; the
	-- entries after it lose as much of their cum (a uniform shift: unique)
	if not sc or sc <= s.cut then return true end
	local e = call('ZRANGEBYSCORE', s.key, int(sc), int(sc))
	local c, k = parse(e[1] or '')
	if not c then return true end
	local later = call('ZRANGEBYSCORE', s.key, '(' .. int(sc), '+inf', 'WITHSCORES')
	for j = 1, #later, 2 do
		if not parse(later[j]) then return false end
	end
	local r = -delta
	if r > k then r = k end
	call('ZREM', s.key, e[1])
	if r < k then call('ZADD', s.key, int(sc), format('%x:%x', c - r, k - r)) end
	for j = 1, #later, 2 do
		local cj, kj = parse(later[j])
		call('ZREM', s.key, later[j])
		call('ZADD', s.key, later[j + 1], format('%x:%x', cj - r, kj))
	end
	return true
end

-- What a token bucket of burst <b>, window <w> us and limit <l> leaves
-- owing <d> us and <f> / l: remaining and reset as its next decision reads
-- them (at most a full bucket owed).
local function state_gcra(b, w, l, d, f)
	local qb, rb = divmod(b * w, l)
	if d > qb or (d == qb and f > rb) then d, f = qb, rb end
	local reset = d
	if f > 0 then reset = d + 1 end
	return divmod(b * w - d * l - f, w), reset
end

-- Settle <delta> units in the token bucket <key> of limit <l>, burst <b>
-- and window <w> ms, when it was written for them: the TAT moves by
-- delta * w / l (a refund: to now at the earliest, the bucket full).
-- Returns what it leaves (state_gcra), or nil when it was not.
local function settle_gcra(key, l, b, w, delta)
	local v = call('GET', key)
	local d, f = 0, 0
	w = w * 1000
	if v then
		local ts, fs, ms1, ls1, os1 = match(v, '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
		if not ts then return nil end
		local t, fr, o = tonumber(ts), tonumber(fs), tonumber(os1)
		if not (tonumber(ms1) * 1000 == w and tonumber(ls1) == l and o <= t) then return nil end
		d, f = t - now, fr
		if f >= l then d, f = d + 1, 0 end
		if d < 0 then d, f = 0, 0 end
	end
	if delta == 0 or (not v and delta < 0) then return state_gcra(b, w, l, d, f) end
	-- (a whole bucket's worth or more: empty or full either way; below
	-- 2^52, exact in doubles)
	local m = delta < 0 and -delta or delta
	if m > floor(GCRA_MAX / w) then m = floor(GCRA_MAX / w) end
	local q, r = divmod(m * w, l)
	if delta > 0 then
		d, f = d + q, f + r
		if f >= l then d, f = d + 1, f - l end
	else
		d, f = d - q, f - r
		if f < 0 then d, f = d - 1, f + l end
		if d < 0 then d, f = 0, 0 end
	end
	local reset = d
	if f > 0 then reset = d + 1 end
	call('SET', key, format('%d:%d:%d:%d:%d', now + d, f, w / 1000, l, d))
	expire(key, int(divmod(reset + 999, 1000) + 1))
	return state_gcra(b, w, l, d, f)
end

if ARGV[1] == 'settle' then
	local n, real = #KEYS - 1, tonumber(ARGV[2])
	if n < 1 or #ARGV ~= 2 + 2 * n or not (real and real >= 0 and real % 1 == 0 and real <= 1e15) then
		return redis.error_reply(BAD_ARGS)
	end
	for i = 1, n do
		local ws = ARGV[2 + 2 * i]
		if not (num(ARGV[1 + 2 * i]) and (num(ws) or match(ws, '^gcra:%d+:%d+$'))) then
			return redis.error_reply(BAD_WINDOW)
		end
	end
	-- no record (settled, ended, never made): nothing moves, the state is
	-- still read
	local v = call('GET', KEYS[n + 1])
	local cs, rest = match(v or '', '^c(%x+)([/%d]*)$')
	local code, delta, sc = 0, 0, {}
	if cs then
		call('DEL', KEYS[n + 1])
		code, delta = 1, real - tonumber(cs, 16)
		local i = 0
		for x in rest:gmatch('/(%d+)') do
			i = i + 1
			sc[i] = x + 0
		end
	end
	local known, best, lim, rem, reset = true, 0, 0, 0, 0
	for i = 1, n do
		local l, ws = num(ARGV[1 + 2 * i]), ARGV[2 + 2 * i]
		local gm, gb = match(ws, '^gcra:(%d+):(%d+)$')
		local r1, t1, l1
		if gm then
			r1, t1 = settle_gcra(KEYS[i], l, tonumber(gb), tonumber(gm), delta)
			l1 = tonumber(gb)
		else
			local s = { key = KEYS[i], win = num(ws), limit = l }
			if not settle_log(s, delta, sc[i]) then return redis.error_reply(BAD_ENTRY) end
			r1, t1 = state_log(s)
			l1 = l
		end
		if not r1 then
			known = false
		elseif best == 0 or r1 < rem then
			best, lim, rem, reset = i, l1, r1, t1
		end
	end
	if not known then return { code, delta } end
	return { code, delta, lim, rem, reset, best - 1 }
end

if ARGV[1] == 'release' then
	local key, id = KEYS[1], ARGV[2]
	if #KEYS ~= 1 or #ARGV ~= 2 or not match(id, '^%x+$') or #id > 64 then
		return redis.error_reply(BAD_ARGS)
	end
	local sc, code = call('ZSCORE', key, id), 0
	if sc then
		call('ZREM', key, id)
		code = 2
		if sc + 0 > now then code = 1 end
	end
	call('ZREMRANGEBYSCORE', key, '-inf', nows)
	return { code, call('ZCARD', key) }
end

if ARGV[1] ~= 'batch' then
	local n = #KEYS
	if n >= 3 and #ARGV == 2 * n - 1 and is_pool(ARGV[#ARGV]) then
		return decide(0, 0, n - 2, true)
	end
	if n < 1 or #ARGV ~= 1 + 2 * n then
		return redis.error_reply(BAD_ARGS)
	end
	return decide(0, 0, n)
end

-- The number of arguments of the batch decision whose key count <nk> is
-- ARGV[ai + 1] (with it): a pooled one's last pair is its pool's.
local function batch_nargs(ai, nk)
	if nk >= 3 and is_pool(ARGV[ai + 2 * nk]) then return 2 * nk end
	return 2 + 2 * nk
end

local nb = num(ARGV[2])
if not nb then return redis.error_reply(BAD_BATCH) end
-- Check the whole layout before deciding anything: a malformed batch
-- writes nothing. Decision d: its key count at ARGV[ai + 1], then its cost
-- and limit/window pairs.
local ki, ai = 0, 2
for d = 1, nb do
	local nk = num(ARGV[ai + 1])
	if not nk or ki + nk > #KEYS or ai + batch_nargs(ai, nk) > #ARGV then
		return redis.error_reply(BAD_BATCH)
	end
	ki, ai = ki + nk, ai + batch_nargs(ai, nk)
end
if ki ~= #KEYS or ai ~= #ARGV then return redis.error_reply(BAD_BATCH) end
local out = {}
held = {}
ki, ai = 0, 2
for d = 1, nb do
	local nk = num(ARGV[ai + 1])
	local na = batch_nargs(ai, nk)
	-- A failed decision (Redis refused a write: OOM) is its own error; the
	-- decisions before it stand, so the batch goes on.
	local ok, r
	if na == 2 * nk then
		ok, r = pcall(decide, ki, ai + 1, nk - 2, true)
	else
		ok, r = pcall(decide, ki, ai + 1, nk)
	end
	if not ok then
		if type(r) == 'table' and r.err then r = { err = r.err } else r = { err = 'ERR ' .. tostring(r) } end
	end
	out[d] = r
	ki, ai = ki + nk, ai + na
end
-- Expired entries are out of every count already (counts are by score):
-- dropping them last changes no answer.
local h = held
held = nil
for j = 1, #h, 2 do trim(h[j], h[j + 1]) end
return out
