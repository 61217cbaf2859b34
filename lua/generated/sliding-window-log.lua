-- GENERATED FILE, do not edit. The script this crate sends to Redis for a
-- limiter with one sliding-window-log quota.
-- Assembled by LimiterScript::for_quotas (src/store/redis/script.rs) from the
-- files in lua/; everything below this header is sent byte for byte
-- (SCRIPT LOAD, then EVALSHA d81db65e0fae89be8168228d1bed4f6eb5205909).
-- Regenerate: UPDATE_GENERATED=1 cargo test --all-features --lib generated_scripts
local READS_TIME = true
-- tower-redis-ratelimit: shared prelude. A limiter's script is this file, then
-- single.lua with its strategy's block spliced in (one quota), or each used
-- strategy's block wrapped as a function S[<id>] followed by multi.lua
-- (several quotas, all-or-nothing). Redis compiles each distinct script
-- once; EVALSHA runs it.
--
-- ARGV[1] is 'T' for Redis's own clock (TIME, read once per call by scripts
-- that need it), or else the time in microseconds from a manual clock: any
-- integer, 0 included (a manual clock saturates well below 2^53).
-- All times are integer microseconds held in Lua numbers (exact below 2^53).
--
-- Every strategy block reads key, n, period, burst, interval, cost, nonce,
-- apply and now, and sets ok (1/0), rem (remaining), reset (reset_after),
-- retry (retry_after, -1 = never) and delay.
-- With apply = false nothing is consumed, but the numbers are those the
-- request would get if it were; with apply = true an allowed request with
-- cost > 0 is written. reset_after is also the key's TTL: after it the state
-- is the same as no state.
local MANUAL = ARGV[1] ~= 'T'
-- The decision's time: the manual clock's, or Redis's own TIME, read once.
-- READS_TIME (set before this file) is false only for fixed-window-only
-- scripts, whose Redis-clock path needs no time (the key's TTL is the window).
local NOW = tonumber(ARGV[1])
if not MANUAL then
  if READS_TIME then
    local t = redis.call('TIME')
    NOW = t[1] * 1000000 + t[2]
  else
    NOW = nil
  end
end

local fmt, ceil = string.format, math.ceil
-- Redis expires keys on its own clock, which a manual clock need not follow:
-- a simulation may move slower than real time. On a manual clock every TTL is
-- GRACE ms longer, so up to that much real time may pass while the manual
-- time stands still without Redis forgetting state that it still needs
-- (state kept past its time reads as no state: every strategy compares
-- times). On Redis's clock TTLs are exact.
local GRACE = 0
if MANUAL then GRACE = 60000 end
-- There are no helper functions here on purpose: Lua creates a closure for
-- every function definition each time a script runs, which measurably slows
-- every call (GCRA: 7.2 against 5.5 µs of Redis time), so the few helpers are
-- written out where they are used:
--   integer to exact text (tostring may use exponents): fmt('%.0f', x)
--   TTL in whole milliseconds, rounded up:              fmt('%.0f', ceil(us / 1000) + GRACE)
--   a denied request writes nothing, but a key found without a TTL gets one:
--     if reset > 0 and redis.call('PTTL', key) == -1 then ... PEXPIRE ... end
-- Sorted-set helpers of SlidingWindowLog and Concurrency.

-- Adds `cost` members `<nonce>.<i>` with `score`, 256 per ZADD.
local function zadd_members(key, score, nonce, cost)
  local s = fmt('%.0f', score)
  local i = 0
  while i < cost do
    local batch = {}
    local j = 0
    while j < 256 and i < cost do
      batch[#batch + 1] = s
      batch[#batch + 1] = nonce .. '.' .. i
      i = i + 1
      j = j + 1
    end
    redis.call('ZADD', key, unpack(batch))
  end
end

-- The score at rank `idx` (0 = lowest, -1 = highest).
local function zscore_at(key, idx)
  return tonumber(redis.call('ZRANGE', key, idx, idx, 'WITHSCORES')[2])
end
-- One quota. KEYS[1]; ARGV: now ('T' = Redis's clock), cost, count, period,
-- burst, interval (microseconds; a fixed window sends only count and period),
-- then the nonce when the strategy needs one.
-- The strategy's code is spliced in at the marker below, as a block: no
-- function is created per call.
-- Reply: one string of integers "ok ok remaining reset_after retry_after delay"
-- (one bulk string is much cheaper for clients to parse than an array).
local key, n, period = KEYS[1], tonumber(ARGV[3]), tonumber(ARGV[4])
local burst, interval = tonumber(ARGV[5]), tonumber(ARGV[6])
local cost, nonce, apply, now = tonumber(ARGV[2]), ARGV[7], true, NOW
local ok, rem, reset, retry, delay
do
-- SlidingWindowLog: sorted set of (score = request time, member = unique id).
-- Exact: at most n requests with a time in (now - period, now].
local expired = fmt('%.0f', now - period)
-- Count without writing: under maxmemory the first write must be the ZADD,
-- so that Redis refuses it (expired entries are removed after it).
local c = redis.call('ZCOUNT', key, '(' .. expired, '+inf')
local newest = now - period
if c > 0 then newest = zscore_at(key, -1) end
reset = 0
if c > 0 then reset = newest + period - now end
if cost > n or c + cost > n then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', expired)
  ok, rem, retry, delay = 0, n - c, -1, 0
  if cost <= n then
    -- the (c + cost - n)-th oldest entry must leave the window first
    retry = zscore_at(key, c + cost - n - 1) + period - now
  end
  if reset > 0 and redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, fmt('%.0f', ceil(reset / 1000) + GRACE))
  end
else
  if cost > 0 then
    if newest < now then newest = now end
    reset = newest + period - now
    if apply then
      zadd_members(key, now, nonce, cost)
      redis.call('ZREMRANGEBYSCORE', key, '-inf', expired)
      redis.call('PEXPIRE', key, fmt('%.0f', ceil(reset / 1000) + GRACE))
    end
  end
  ok, rem, retry, delay = 1, n - c - cost, -1, 0
end
end
return fmt('%d %d %d %d %d %d', ok, ok, rem, reset, retry, delay)
