-- sliding_window.lua - one rate-limit decision, atomically (sliding-window log).
--
-- KEYS[i]      one sorted set per window of the policy (score = Redis time, us)
-- ARGV[1]      cost: units this request consumes (>= 1)
-- ARGV[2]      member prefix, unique per request; members are <prefix>:<n>
-- ARGV[1+2i]   limit of window i        ARGV[2+2i]  length of window i, ms
--
-- Returns { allowed 0|1, limit, remaining, reset_us, retry_after_us, index }
-- for the deciding window (0-based index): the least remaining when allowed,
-- the denying window with the longest retry when denied.
--
-- Rules: time is Redis's own (every agent shares one clock); an entry exactly
-- one window old is out; admission is all-or-nothing over the windows; a
-- denial writes nothing but the trims (a refused request does not count and
-- does not extend the TTL).

local cost = tonumber(ARGV[1])
local prefix = ARGV[2]
local n = #KEYS
if not cost or cost < 1 or not prefix or n < 1 or #ARGV ~= 2 + 2 * n then
	return redis.error_reply('ERR sliding_window: bad arguments')
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- Lua 5.1 prints numbers with %.14g, which would round a microsecond
-- timestamp (16 digits); hand Redis exact integer strings instead.
local function int(x)
	return string.format('%.0f', x)
end

-- Score of the entry at 0-based rank <idx>, or nil.
local function score_at(key, idx)
	local r = redis.call('ZRANGE', key, idx, idx, 'WITHSCORES')
	if r[2] then return tonumber(r[2]) end
	return nil
end

local limit, win, count = {}, {}, {}
local allowed = true
for i = 1, n do
	limit[i] = tonumber(ARGV[1 + 2 * i])
	win[i] = tonumber(ARGV[2 + 2 * i])
	if not limit[i] or limit[i] < 1 or not win[i] or win[i] < 1 then
		return redis.error_reply('ERR sliding_window: bad limit or window')
	end
	-- Inclusive bound: score <= now - window goes, so an entry exactly one
	-- window old is out.
	redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', int(now - win[i] * 1000))
	count[i] = redis.call('ZCARD', KEYS[i])
	if count[i] + cost > limit[i] then allowed = false end
end

local best, best_rem, best_reset, best_retry
if allowed then
	for i = 1, n do
		-- ZADD in chunks: unpack() of a huge cost would overflow Lua's C stack.
		local args, m = {}, 0
		for j = 1, cost do
			args[#args + 1] = int(now)
			args[#args + 1] = prefix .. ':' .. j
			m = m + 1
			if m == 500 or j == cost then
				redis.call('ZADD', KEYS[i], unpack(args))
				args, m = {}, 0
			end
		end
		redis.call('PEXPIRE', KEYS[i], int(win[i]))
		local rem = limit[i] - count[i] - cost
		if not best or rem < best_rem then
			best, best_rem = i, rem
		end
	end
	-- The oldest in-window entry exists (we just added some): reset is when it leaves.
	local w = win[best] * 1000
	best_reset = score_at(KEYS[best], 0) + w - now
	best_retry = 0
else
	for i = 1, n do
		local need = count[i] + cost - limit[i]
		if need > 0 then
			local w = win[i] * 1000
			-- Enough entries must leave for <cost> to fit: the one at rank
			-- need-1 is the last of them. None when cost > limit: never fits,
			-- answer a whole window rather than loop.
			local retry = w
			if need <= count[i] then
				retry = score_at(KEYS[i], need - 1) + w - now
			end
			if not best or retry > best_retry then
				best, best_retry = i, retry
			end
		end
	end
	local w = win[best] * 1000
	best_rem = limit[best] - count[best]
	if best_rem < 0 then best_rem = 0 end
	local oldest = score_at(KEYS[best], 0)
	if oldest then best_reset = oldest + w - now else best_reset = w end
end

return { allowed and 1 or 0, limit[best], best_rem, best_reset, best_retry, best - 1 }
