-- sliding_window.lua - one rate-limit decision, atomically (sliding-window log).
--
-- KEYS[i]      one sorted set per window of the policy (score = Redis time, us)
-- ARGV[1]      cost: units this request consumes (>= 1)
-- ARGV[2]      request id (kept in the argument layout; not stored)
-- ARGV[1+2i]   limit of window i        ARGV[2+2i]  length of window i, ms
--              or "<ms>:<precision ms>" for a bucketed window (KEYS[i] a hash)
--
-- A batch (redis-batch): ARGV[1] = "batch", ARGV[2] = number of decisions,
-- then per decision its key count, cost, request id and limit/window pairs;
-- KEYS are the decisions' keys one after the other. Each is decided as if
-- alone, in order, at one Redis time; the reply is an array of per-decision
-- replies (an error element for a decision that failed: the others stand).
--
-- Returns { allowed 0|1, limit, remaining, reset_us, retry_after_us, index }
-- for the deciding window (0-based index): the least remaining when allowed,
-- the denying window with the longest retry when denied.
--
-- Rules: time is Redis's own (every agent shares one clock); an entry exactly
-- one window old is out; admission is all-or-nothing over the windows; a
-- denial writes nothing but the trims (a refused request does not count and
-- does not extend the TTL).
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
--
-- Entries of the old form (one member per unit "<agent>-<thread>-<n>:<i>",
-- written by agents up to 0.1.0) count one unit each, by a walk of the
-- window. An old-form entry is always written as the newest, so the next
-- decision here sees it at an end and walks; the entry it adds carries a
-- third field, the score of the newest old-form entry seen, and so do the
-- entries after it while that score is in the window: a window whose
-- newest entry lacks it holds no old-form entry in the middle.
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
-- Out of memory: the first write of an admission is a ZADD, which Redis
-- refuses with an OOM error when over maxmemory (noeviction), and nothing
-- has been written before it: counting only reads, trims come after. (A
-- script's first write is the only one Redis checks for OOM; a trim first
-- would let the ZADD through.) No "#!lua" shebang: Redis 6 cannot load one.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- Lua 5.1 prints numbers with %.14g, which would round a microsecond
-- timestamp (16 digits); hand Redis exact integer strings instead.
local function int(x)
	return string.format('%.0f', x)
end

-- cum, cost and old-form mark (or nil) of member <m>; nil for an entry of
-- the old form (never two or three hex fields).
local function parse(m)
	local c, k = string.match(m, '^(%x+):(%x+)$')
	if c then return tonumber(c, 16), tonumber(k, 16) end
	local c3, k3, l3 = string.match(m, '^(%x+):(%x+):(%x+)$')
	if c3 then return tonumber(c3, 16), tonumber(k3, 16), tonumber(l3, 16) end
	return nil
end

local PAGE = 512

-- Bucketed window <key>'s state, read only: count of the buckets that end
-- after <cut>; b = those buckets as { end us, units } oldest first; dead =
-- the fields to trim (ended at or before the cut, or not ours).
local function read_buckets(key, cut)
	local h = redis.call('HGETALL', key)
	local w = { count = 0, b = {}, dead = {} }
	for j = 1, #h, 2 do
		local e, v = tonumber(h[j]), tonumber(h[j + 1])
		if e and v and e * 1000 > cut then
			w.count = w.count + v
			w.b[#w.b + 1] = { e * 1000, v }
		else
			w.dead[#w.dead + 1] = h[j]
		end
	end
	table.sort(w.b, function(x, y) return x[1] < y[1] end)
	if w.b[1] then w.oldest = w.b[1][1] end
	return w
end

-- Time until <need> units have left bucketed window <w>: a bucket leaves
-- when the cut reaches its end, one window after it. Never early.
local function retry_buckets(w, need, win_us)
	local acc = 0
	for j = 1, #w.b do
		acc = acc + w.b[j][2]
		if acc >= need then return w.b[j][1] + win_us - now end
	end
	return win_us
end

-- Trims a batch holds back until every decision of it has tried its first
-- write (nil outside a batch): Redis checks a script's writes against
-- maxmemory only until the script has written once, so one decision's trim
-- must not let a later decision's admission past that check.
local held_trims = nil

-- Drop window <i>'s expired entries or buckets (after the first write).
local function trim(key, w, cuts)
	if held_trims then
		held_trims[#held_trims + 1] = { key, w, cuts }
	elseif not w.dead then
		redis.call('ZREMRANGEBYSCORE', key, '-inf', cuts)
	elseif w.dead[1] then
		redis.call('HDEL', key, unpack(w.dead))
	end
end

-- Window <key>'s state, read only: count; cum and score of the newest entry
-- (to chain the next one); score and cost of the oldest in-window entry;
-- old: score of the newest old-form entry that may be in the window (nil
-- in the fast form, where every in-window entry has a cum).
local function read_window(key, cut, cuts)
	local lo = '(' .. cuts
	local w = { count = 0, cum = 0 }
	local a = redis.call('ZRANGEBYSCORE', key, lo, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
	if not a[1] then return w end
	local b = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
	w.oldest, w.top = tonumber(a[2]), tonumber(b[2])
	local c1, k1 = parse(a[1])
	local c2, _, l2 = parse(b[1])
	if c1 and c2 and not (l2 and l2 > cut) then
		w.count, w.cum, w.first = c2 - c1 + k1, c2, k1
		return w
	end
	-- Old-form entries in the window: walk it (only until they are gone).
	w.old = 0
	if l2 and l2 > cut then w.old = l2 end
	local off = 0
	repeat
		local r = redis.call('ZRANGEBYSCORE', key, lo, '+inf', 'WITHSCORES', 'LIMIT', off, PAGE)
		for j = 1, #r, 2 do
			local c, k = parse(r[j])
			if c then
				w.count, w.cum = w.count + k, c
			else
				w.count = w.count + 1
				w.old = tonumber(r[j + 1])
			end
		end
		off = off + PAGE
	until #r < 2 * PAGE
	return w
end

-- Time until <need> units have left window <w> of <key> (after its trim, so
-- rank 0 is the oldest in-window entry; in a batch, after the expired ones): when the entry whose leaving frees
-- the <need>th unit leaves. Binary search on cum in the fast form, a walk
-- otherwise. Never early: an entry leaves exactly one window after its score.
local function retry_for(key, w, need, win_us, cuts)
	-- the usual case (cost 1 on a full window): the oldest is enough
	if not w.old and w.first >= need then return w.oldest + win_us - now end
	-- In a batch the trim is held back: rank <skip> is the oldest in-window.
	-- (Counted with ZRANGEBYSCORE, not ZCOUNT, to stay within the command set
	-- of the documented ACL: the entries that left since this key's last
	-- decision, few on a key busy enough to be denied.)
	local skip = 0
	if held_trims then skip = #redis.call('ZRANGEBYSCORE', key, '-inf', cuts) end
	local function at(r)
		local x = redis.call('ZRANGE', key, r, r, 'WITHSCORES')
		return x[1], tonumber(x[2])
	end
	if not w.old then
		local base = w.count - w.cum   -- cum of the entry before the oldest, negated
		local lo, hi = skip, redis.call('ZCARD', key) - 1
		while lo < hi do
			local mid = math.floor((lo + hi) / 2)
			local c = parse((at(mid)))
			if c + base >= need then hi = mid else lo = mid + 1 end
		end
		local _, s = at(lo)
		return s + win_us - now
	end
	local acc, off = 0, skip
	repeat
		local r = redis.call('ZRANGE', key, off, off + PAGE - 1, 'WITHSCORES')
		for j = 1, #r, 2 do
			local _, k = parse(r[j])
			acc = acc + (k or 1)
			if acc >= need then return tonumber(r[j + 1]) + win_us - now end
		end
		off = off + PAGE
	until #r < 2 * PAGE
	return win_us
end

-- One decision: KEYS and ARGV are this decision's own (the script's, or its
-- slice of a batch).
local function decide(KEYS, ARGV)
local cost = tonumber(ARGV[1])
local n = #KEYS
if not cost or cost < 1 or not ARGV[2] or n < 1 or #ARGV ~= 2 + 2 * n then
	return redis.error_reply('ERR sliding_window: bad arguments')
end

-- (strings made once: formatting numbers is a good part of the script's time)
local nows = int(now)
local limit, win, prec, cut, cuts, st = {}, {}, {}, {}, {}, {}
local allowed = true
for i = 1, n do
	local ws, ps = string.match(ARGV[2 + 2 * i], '^(%d+):(%d+)$')
	limit[i] = tonumber(ARGV[1 + 2 * i])
	win[i] = tonumber(ws or ARGV[2 + 2 * i])
	prec[i] = ps and tonumber(ps)
	if not limit[i] or limit[i] < 1 or not win[i] or win[i] < 1 or prec[i] == 0 then
		return redis.error_reply('ERR sliding_window: bad limit or window')
	end
	-- Inclusive bound: score <= now - window is out, so an entry exactly
	-- one window old does not count.
	cut[i] = now - win[i] * 1000
	cuts[i] = int(cut[i])
	if prec[i] then
		st[i] = read_buckets(KEYS[i], cut[i])
	else
		st[i] = read_window(KEYS[i], cut[i], cuts[i])
	end
	if st[i].count + cost > limit[i] then allowed = false end
end

local best, best_rem, best_reset, best_retry
if allowed then
	local score = {}
	for i = 1, n do
		if prec[i] then
			-- The bucket of <now>: score = its end (us), where it leaves.
			local e = (math.floor(math.floor(now / 1000) / prec[i]) + 1) * prec[i]
			score[i] = e * 1000
			redis.call('HINCRBY', KEYS[i], int(e), cost)
		else
			-- Above the newest entry, so that rank order stays cum order (a
			-- later stamp only makes this entry live longer, never shorter).
			score[i] = now
			if st[i].top and st[i].top >= now then score[i] = st[i].top + 1 end
			local m = string.format('%x:%x', st[i].cum + cost, cost)
			if st[i].old and st[i].old > cut[i] then m = m .. string.format(':%x', st[i].old) end
			redis.call('ZADD', KEYS[i], score[i] == now and nows or int(score[i]), m)
		end
	end
	for i = 1, n do
		trim(KEYS[i], st[i], cuts[i])
		-- (a bucket's score, its end, is always after now)
		local ttl = ARGV[2 + 2 * i]
		if score[i] ~= now then ttl = int(win[i] + math.ceil((score[i] - now) / 1000)) end
		redis.call('PEXPIRE', KEYS[i], ttl)
		local rem = limit[i] - st[i].count - cost
		if not best or rem < best_rem then
			best, best_rem = i, rem
		end
	end
	-- reset: when the oldest in-window entry or bucket (perhaps the new
	-- one) leaves.
	best_reset = (st[best].oldest or score[best]) + win[best] * 1000 - now
	best_retry = 0
else
	for i = 1, n do
		trim(KEYS[i], st[i], cuts[i])
	end
	for i = 1, n do
		local need = st[i].count + cost - limit[i]
		if need > 0 then
			local w = win[i] * 1000
			-- cost > limit never fits: answer a whole window rather than loop.
			local retry = w
			if need <= st[i].count and prec[i] then
				retry = retry_buckets(st[i], need, w)
			elseif need <= st[i].count then
				retry = retry_for(KEYS[i], st[i], need, w, cuts[i])
			end
			if not best or retry > best_retry then
				best, best_retry = i, retry
			end
		end
	end
	local w = win[best] * 1000
	best_rem = limit[best] - st[best].count
	if best_rem < 0 then best_rem = 0 end
	if st[best].oldest then best_reset = st[best].oldest + w - now else best_reset = w end
end

return { allowed and 1 or 0, limit[best], best_rem, best_reset, best_retry, best - 1 }
end

if ARGV[1] ~= 'batch' then return decide(KEYS, ARGV) end

local nb = tonumber(ARGV[2])
if not nb or nb < 1 then
	return redis.error_reply('ERR sliding_window: bad batch')
end
-- Check the whole layout before deciding anything: a malformed batch
-- writes nothing.
local slices, ki, ai = {}, 0, 2
for d = 1, nb do
	local nk = tonumber(ARGV[ai + 1])
	if not nk or nk < 1 or ki + nk > #KEYS or ai + 3 + 2 * nk > #ARGV then
		return redis.error_reply('ERR sliding_window: bad batch')
	end
	slices[d] = { ki, ai, nk }
	ki, ai = ki + nk, ai + 3 + 2 * nk
end
if ki ~= #KEYS or ai ~= #ARGV then
	return redis.error_reply('ERR sliding_window: bad batch')
end
local out = {}
held_trims = {}
for d = 1, nb do
	local k0, a0, nk = slices[d][1], slices[d][2], slices[d][3]
	local K, A = {}, { ARGV[a0 + 2], ARGV[a0 + 3] }
	for i = 1, nk do K[i] = KEYS[k0 + i] end
	for i = 1, 2 * nk do A[2 + i] = ARGV[a0 + 3 + i] end
	-- A failed decision (Redis refused a write: OOM) is its own error; the
	-- decisions before it stand, so the batch goes on.
	local ok, r = pcall(decide, K, A)
	if not ok then
		if type(r) == 'table' and r.err then r = { err = r.err } else r = { err = 'ERR ' .. tostring(r) } end
	end
	out[d] = r
end
-- Expired entries are out of every count already (counts are by score):
-- dropping them last changes no answer.
local held = held_trims
held_trims = nil
for _, t in ipairs(held) do trim(t[1], t[2], t[3]) end
return out
