-- bench-wrk.lua - wrk script for `make bench`: authenticated transfers, one
-- pre-minted token per account.
--
--   wrk -s tools/bench-wrk.lua URL -- TOKENS_FILE [HOT_N HOT_PCT [header]]
--
-- With "header", each line is sent as it is in an X-Bench-Account header
-- instead of as a bearer token (the bench's no-JWT edge reads it).
--
-- TOKENS_FILE holds one JWT per line; line i is account ACC-(i-1). Each
-- request picks a token uniformly, or, with probability HOT_PCT percent, one
-- of the first HOT_N accounts (the abusers). Requests are built once in
-- init(): per request wrk only picks one, so the client costs the same in
-- every run. done() prints one parseable line with the HTTP status counts:
--
--   STATUS 201=123 429=45 503=0 401=0 other=0

local reqs = {}
local hot_n, hot_pct = 0, 0
counts = {}                 -- global: done() reads it from each thread

local threads = {}

function setup(thread)
	thread:set("tid", #threads + 1)
	table.insert(threads, thread)
end

function init(args)
	local path = args[1]
	hot_n = tonumber(args[2] or "0") or 0
	hot_pct = tonumber(args[3] or "0") or 0
	local body = '{"to":"ACC-0","amount":"1.00","currency":"EUR"}'
	local plain = args[4] == "header"
	for line in io.lines(path) do
		if #line > 0 then
			local h = { ["Content-Type"] = "application/json" }
			if plain then
				h["X-Bench-Account"] = line
			else
				h["Authorization"] = "Bearer " .. line
			end
			reqs[#reqs + 1] = wrk.format("POST", "/transfers", h, body)
		end
	end
	if #reqs == 0 then
		error("no tokens in " .. tostring(path))
	end
	if hot_n > #reqs then hot_n = #reqs end
	-- each thread its own sequence
	math.randomseed(os.time() * 1000 + (tid or 0))
end

function request()
	if hot_n > 0 and math.random() * 100 < hot_pct then
		return reqs[math.random(hot_n)]
	end
	return reqs[math.random(#reqs)]
end

function response(status, headers, body)
	counts[status] = (counts[status] or 0) + 1
end

function done(summary, latency, requests)
	local total = {}
	for _, t in ipairs(threads) do
		local c = t:get("counts")
		for k, v in pairs(c or {}) do
			total[k] = (total[k] or 0) + v
		end
	end
	local other = 0
	for k, v in pairs(total) do
		if k ~= 201 and k ~= 429 and k ~= 503 and k ~= 401 then
			other = other + v
		end
	end
	io.write(string.format("STATUS 201=%d 429=%d 503=%d 401=%d other=%d\n",
		total[201] or 0, total[429] or 0, total[503] or 0, total[401] or 0, other))
end
