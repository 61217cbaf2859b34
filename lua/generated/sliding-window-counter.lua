-- GENERATED FILE, do not edit. The script this crate sends to Redis for a
-- limiter with one sliding-window-counter quota.
-- Assembled by LimiterScript::for_quotas (src/store/redis/script.rs) from the
-- files in lua/; everything below this header is sent byte for byte
-- (SCRIPT LOAD, then EVALSHA 477579446d25066023b6af433b35b10e101cb32b).
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
-- SlidingWindowCounter: the aligned window w = floor(now / period), its count
-- c and the previous window's count p. The estimate is c + floor(p * overlap),
-- where overlap is the share of the previous window still inside the sliding
-- window. reset_after: until the end of the next window while this one has a
-- count, else until the end of this one while the previous had one.
--
-- The key is one string. On Redis's clock (with n < 2^21 and a period of at
-- least 1 ms) it is one integer, (c * 2^21 + p) * 1024 + w % 1024: the key
-- expires at the end of the window after its own (TTLs are exact on Redis's
-- clock, up to a millisecond of rounding), so while it exists its window is
-- at most a few windows back, which w's low ten bits tell apart (a few windows
-- ahead: Redis's clock went back). Otherwise (a manual clock, whose time need
-- not follow the TTL) it is the text 'w c p'. Either is read on any clock
-- (an integer needs Redis's clock to be read), so a rate change of a named
-- quota reads the counts (they mean the same under any count).
local w = math.floor(now / period)
local packed = not MANUAL and n < 2097152 and period >= 1000
local v = redis.call('GET', key)
local x = tonumber(v)
local sw, c, p
if x then
  if packed then
    local d = (w - x % 1024) % 1024
    if d <= 8 then sw = w - d elseif d >= 1016 then sw = w + 1024 - d end
    x = math.floor(x / 1024)
    c = math.floor(x / 2097152)
    p = x - c * 2097152
  end
elseif v then
  local a, b, e = string.match(v, '^(%d+) (%d+) (%d+)$')
  sw, c, p = tonumber(a), tonumber(b), tonumber(e)
end
if not sw or not c or not p then
  c, p = 0, 0
elseif sw == w - 1 then
  c, p = 0, c
elseif sw > w then
  w = sw -- the clock went backwards: stay in the stored window
elseif sw ~= w then
  c, p = 0, 0
end
local e = now - w * period
if e < 0 then e = 0 end
local used = c + math.floor(p * ((period - e) / period))
if cost > n or used + cost > n then
  ok, rem, reset, retry, delay = 0, n - used, 0, -1, 0
  if rem < 0 then rem = 0 end
  if cost <= n then
    local a = n - cost - c
    if a >= 0 then
      retry = period + 1 - math.ceil((a + 1) * period / p) - e
    else
      local emin = period + 1 - math.ceil((n - cost + 1) * period / c)
      if emin < 0 then emin = 0 end
      retry = (w + 1) * period - now + emin
    end
  end
  if c > 0 then reset = (w + 2) * period - now elseif p > 0 then reset = (w + 1) * period - now end
  if reset > 0 and redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, fmt('%d', ceil(reset / 1000) + GRACE))
  end
else
  ok, rem, reset, retry, delay = 1, n - used - cost, 0, -1, 0
  if c + cost > 0 then reset = (w + 2) * period - now elseif p > 0 then reset = (w + 1) * period - now end
  if apply and cost > 0 then
    if x and packed and sw == w then
      -- the stored window: its count grows in place, and its TTL, set when
      -- the window's first request was written (every write sets or keeps
      -- one), already ends with the next window
      local by = '2147483648'
      if cost ~= 1 then by = fmt('%d', cost * 2147483648) end
      redis.call('INCRBY', key, by)
    elseif packed and p < 2097152 then
      redis.call('SET', key, fmt('%d', ((c + cost) * 2097152 + p) * 1024 + w % 1024), 'PX',
        fmt('%d', ceil(reset / 1000)))
    else
      redis.call('SET', key, fmt('%d %d %d', w, c + cost, p), 'PX', fmt('%d', ceil(reset / 1000) + GRACE))
    end
  end
end
end
-- (each formatted number costs Redis about a sixth of a command: the common
-- answer, allowed at once, formats two)
if ok == 1 and delay == 0 then return fmt('1 1 %d %d -1 0', rem, reset) end
return fmt('%d %d %d %d %d %d', ok, ok, rem, reset, retry, delay)
