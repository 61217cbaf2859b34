-- GENERATED FILE, do not edit. The script this crate sends to Redis for a
-- limiter with one fixed-window quota and block_for(60 s): the penalty box.
-- Assembled by LimiterScript::for_quotas (src/store/redis/script.rs) from the
-- files in lua/; everything below this header is sent byte for byte
-- (SCRIPT LOAD, then EVALSHA 2ea893fcb4c0cec2a1afbc625fe4495fb5bdd8e0).
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
local BLOCK_US, TAKE = 60000000, false
-- Penalty box, in the scripts of limiters built with blocking only (others
-- never pay for it). The last key, `{<prefix>:<key>}:!`, holds the time its
-- block ends, with a TTL until then (plus the manual clock's grace). While it
-- is ahead of NOW every quota denies and retries when the block ends; nothing
-- is read or consumed. BLOCK_US (set before this file) is the penalty of a
-- denial (0: blocks are only set by RateLimiter::block); TAKE tells whether
-- the reply ends with NOW (a settle's or a local budget's take).
local BK = KEYS[#KEYS]
local BT = tonumber(redis.call('GET', BK))
if BT and BT > NOW then
  local r = fmt('0 0 %d %d 0', BT - NOW, BT - NOW)
  local out = { '0' }
  for i = 1, #KEYS - 1 do out[i + 1] = r end
  if TAKE then out[#KEYS + 1] = fmt('%d', NOW) end
  return table.concat(out, ' ')
end
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
-- FixedWindow. The window starts at the key's first hit and lasts `period`.
--
-- On Redis's clock the key is a plain counter whose TTL is the rest of the
-- window: GET and PTTL, then INCRBY (PEXPIRE on the first hit), with no TIME
-- call; the one-quota case usually takes fixed_window_fast.lua instead. With a
-- manual clock the key is a hash {s = window start, c = count} so that windows
-- follow the manual time.
if not MANUAL then
  local ms = ceil(period / 1000)
  local c = tonumber(redis.call('GET', key) or '0')
  local ttl = 0
  if c > 0 then
    ttl = redis.call('PTTL', key)
    if ttl == -1 then
      -- repair a key found without a TTL
      ttl = ms
      redis.call('PEXPIRE', key, fmt('%d', ms))
    end
    if ttl < 0 then ttl = 0 end
  end
  if cost > n or c + cost > n then
    ok, rem, reset, retry, delay = 0, n - c, ttl * 1000, -1, 0
    if cost <= n then retry = ttl * 1000 end
  else
    if cost > 0 and c == 0 then ttl = ms end
    if apply and cost > 0 then
      redis.call('INCRBY', key, fmt('%d', cost))
      if c == 0 then redis.call('PEXPIRE', key, fmt('%d', ms)) end
    end
    ok, rem, reset, retry, delay = 1, n - c - cost, ttl * 1000, -1, 0
  end
else
  local st = redis.call('HMGET', key, 's', 'c')
  local s, c = tonumber(st[1]), tonumber(st[2])
  if not s or not c or now >= s + period then
    s, c = now, 0
  end
  local left = s + period - now
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
        redis.call('HSET', key, 's', fmt('%d', s), 'c', fmt('%d', cost))
      else
        redis.call('HINCRBY', key, 'c', fmt('%d', cost))
      end
      redis.call('PEXPIRE', key, fmt('%d', ceil(left / 1000) + GRACE))
    end
    ok, rem, reset, retry, delay = 1, n - c - cost, 0, -1, 0
    if c + cost > 0 then reset = left end
  end
end
end
-- a denial starts a block (lua/block.lua)
if ok == 0 and cost > 0 and BLOCK_US > 0 then
redis.call('SET', BK, fmt('%d', NOW + BLOCK_US), 'PX', fmt('%d', ceil(BLOCK_US / 1000) + GRACE))
if retry >= 0 and retry < BLOCK_US then retry = BLOCK_US end
end
-- (each formatted number costs Redis about a sixth of a command: the common
-- answer, allowed at once, formats two)
if ok == 1 and delay == 0 then return fmt('1 1 %d %d -1 0', rem, reset) end
return fmt('%d %d %d %d %d %d', ok, ok, rem, reset, retry, delay)
