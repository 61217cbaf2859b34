-- GENERATED FILE, do not edit. The script this crate sends to Redis for a
-- limiter with one fixed-window quota of 100 per minute, on Redis's clock, whose denials
-- record: the fast path with lua/fixed_window_fast_record.lua for a denial
-- (its count capped at TOP, as RateLimiter::penalize caps it).
-- Assembled by LimiterScript::for_quotas (src/store/redis/script.rs) from the
-- files in lua/; everything below this header is sent byte for byte
-- (SCRIPT LOAD, then EVALSHA 8987e4487f51e6e149cb7cc848b60adc8b272b10).
-- Regenerate: UPDATE_GENERATED=1 cargo test --all-features --lib generated_scripts
local N, WINDOW_MS, WINDOW, TOP = 100, 60000, '60000', 1876499944
-- FixedWindow fast path: a script of its own for one quota on Redis's clock
-- and a cost that can fit (0 < cost <= n), with the quota's numbers written
-- in. The client puts one line before this file:
--   local N, WINDOW_MS, WINDOW = <n>, <window in ms>, '<window in ms>'
-- so a call of cost 1 sends no ARGV at all, and a larger cost only itself
-- (ARGV[1]). Redis builds and fills an ARGV table on every call, and Lua
-- reads a number from text with strtod: each costs Redis more than this
-- script's arithmetic does. Each distinct (n, window) is one more script in
-- Redis's script cache (about 2.5 kB); a process writes at most a few
-- hundred of them (`FastWindow` in src/store/redis/protocol.rs), other
-- quotas take the limiter's general script.
--
-- The key is the count of the window; its TTL is the rest of the window.
-- The count goes up first (a denial takes its units back), so the first
-- command is the only one that can fail: an error (Redis out of memory, a
-- count at its maximum, a key of another type) has written nothing, and the
-- client asks the general script instead, which only reads on a denial.
-- Reply: the count p before this request and the key's TTL in ms (0 on the
-- window's first hit, p = 0, whose reset is the whole window), as one
-- integer p * 2^32 + ttl, or as the string "p ttl" when that does not fit in
-- 2^53; the client, which knows n, cost and the window, derives the
-- decision (allowed iff p + cost <= n; a denial writes nothing).
-- (Its batch twin, lua/batch_fast.lua, leaves out the line that reads KEYS
-- and ARGV and the final return: keep those two lines as they are.)
local key, cost = KEYS[1], ARGV[1]
local p
if cost then
  p = redis.call('INCRBY', key, cost) - cost
else
  p = redis.call('INCR', key) - 1
end
local ttl = 0
if p == 0 then
  redis.call('PEXPIRE', key, WINDOW)
else
  ttl = redis.call('PTTL', key)
  if ttl < 0 then
    -- repair a key found without a TTL
    ttl = WINDOW_MS
    redis.call('PEXPIRE', key, WINDOW)
  end
end
-- A recording limiter's fast path (RateLimiterBuilder::on_denial): this
-- block replaces fixed_window_fast.lua's take-back of a denial, so that the
-- denied units stay counted past the limit, as lua/adjust_fixed_window.lua
-- charges them (RateLimiter::penalize): a count runs up to TOP (n plus what
-- the rate repays in 2^50 us, written in after the quota's numbers) and no
-- further, never lower than it was.
if p > N - (cost or 1) then
  local c = tonumber(cost or 1)
  if p + c > TOP then
    local back = p + c - TOP
    if back > c then back = c end
    redis.call('DECRBY', key, string.format('%d', back))
  end
end
local reply
if p < 2097152 and p > -2097152 and ttl < 4294967296 then
  reply = p * 4294967296 + ttl
else
  reply = string.format('%d %d', p, ttl)
end
return reply
