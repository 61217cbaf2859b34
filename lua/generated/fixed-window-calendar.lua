-- GENERATED FILE, do not edit. The script this crate sends to Redis for a
-- limiter with one fixed-window quota of a calendar (Quota::calendar).
-- Assembled by LimiterScript::for_quotas (src/store/redis/script.rs) from the
-- files in lua/; everything below this header is sent byte for byte
-- (SCRIPT LOAD, then EVALSHA 4b3e5ebf125b35495c9a26a3f1361b9204567ce0).
-- Regenerate: UPDATE_GENERATED=1 cargo test --all-features --lib generated_scripts
local READS_TIME = true
local READS_BURST = false
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
local NOW
if MANUAL then
  NOW = tonumber(ARGV[1])
elseif READS_TIME then
  local t = redis.call('TIME')
  NOW = t[1] * 1000000 + t[2]
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
-- The quota's period in whole ms, rounded up, as text, where the script's
-- arguments carry it (one quota: see single.lua); else nil.
local PERIOD_MS
-- There are no helper functions here on purpose: Lua creates a closure for
-- every function definition each time a script runs, which measurably slows
-- every call (GCRA: 7.2 against 5.5 µs of Redis time), so the few helpers are
-- written out where they are used:
--   integer to exact text (tostring may use exponents):  fmt('%d', x)
--     (Lua formats %d through a C long: exact for every integer here, all
--     below 2^53, and far cheaper for Redis than '%.0f' or a bare number,
--     which redis.call turns into text with '%.17g')
--   TTL in whole milliseconds, rounded up:              fmt('%d', ceil(us / 1000) + GRACE)
--   a denied request writes nothing, but a key found without a TTL gets one:
--     if reset > 0 and redis.call('PTTL', key) == -1 then ... PEXPIRE ... end
-- One quota. KEYS[1]; ARGV: now ('T' = Redis's clock), cost, then the two
-- numbers the strategy reads, count and period (microseconds), or burst and
-- interval when READS_BURST (set before the prelude), as one string of two
-- little-endian doubles (exact below 2^53; one struct.unpack costs Redis a
-- third of what two tonumber calls do), then that period (or interval) in
-- whole milliseconds, rounded up, as text (PERIOD_MS: the TTL of a state that
-- ends one period from now, sent as is instead of formatted), then the nonce
-- when the strategy needs one. A cost of 1 is not parsed.
-- The strategy's code is spliced in at the marker below, as a block: no
-- function is created per call.
-- Reply: one string of integers "ok ok remaining reset_after retry_after delay"
-- (one bulk string is much cheaper for clients to parse than an array).
local key, cost, nonce, apply, now = KEYS[1], 1, ARGV[5], true, NOW
if ARGV[2] ~= '1' then cost = tonumber(ARGV[2]) end
local n, period, burst, interval
if READS_BURST then
  burst, interval = struct.unpack('<dd', ARGV[3])
else
  n, period = struct.unpack('<dd', ARGV[3])
end
PERIOD_MS = ARGV[4]
local ok, rem, reset, retry, delay
do
-- FixedWindow of a calendar (Quota::calendar): months or years of a time
-- zone, whose bounds Lua cannot compute. The client sends them with each
-- call, from its own clock: period = b, the end of the client's window, in
-- us since the epoch; burst = l1 * 2^25 + l2, the lengths in whole seconds
-- of that window [a, b) and of the next [b, c) (tz offsets are whole
-- seconds, so are the bounds; a year is below 2^25 s). The window is the one
-- of the three ([.., a), [a, b), [b, c)) that holds now: near a bound Redis's
-- clock decides, not the client's.
--
-- The key is a hash {e = the window's end, c = its count}, with a TTL of the
-- rest of the window. A key of an earlier window counts as no state; a
-- window ahead of now (the clock went back) stays the window until it ends.
-- A clock a whole window past the client's counts in [b, c) until 1 us
-- before its end. (One quota: single.lua unpacks only n and period from
-- ARGV[3], which holds burst third.)
if not burst then burst = select(3, struct.unpack('<ddd', ARGV[3])) end
local l1 = math.floor(burst / 33554432)
local e = period
if now < period - l1 * 1000000 then
  e = period - l1 * 1000000
elseif now >= period then
  e = period + (burst - l1 * 33554432) * 1000000
end
local st = redis.call('HMGET', key, 'e', 'c')
local we, c = tonumber(st[1]), tonumber(st[2])
if not we or not c or we < e then c = 0 else e = we end
local left = e - now
if left < 1 then left = 1 end
if cost > n or c + cost > n then
  ok, rem, reset, retry, delay = 0, n - c, 0, -1, 0
  if c > 0 then reset = left end
  if cost <= n then retry = left end
  if reset > 0 and redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, fmt('%d', ceil(reset / 1000) + GRACE))
  end
else
  if apply and cost > 0 then
    if c == 0 then
      redis.call('HSET', key, 'e', fmt('%d', e), 'c', fmt('%d', cost))
    else
      redis.call('HINCRBY', key, 'c', fmt('%d', cost))
    end
    redis.call('PEXPIRE', key, fmt('%d', ceil(left / 1000) + GRACE))
  end
  ok, rem, reset, retry, delay = 1, n - c - cost, 0, -1, 0
  if c + cost > 0 then reset = left end
end
end
-- (each formatted number costs Redis about a sixth of a command: the common
-- answer, allowed at once, formats two)
if ok == 1 and delay == 0 then return fmt('1 1 %d %d -1 0', rem, reset) end
return fmt('%d %d %d %d %d %d', ok, ok, rem, reset, retry, delay)
