-- GENERATED FILE, do not edit. The script this crate sends to Redis for a
-- limiter with a gcra and a sliding-window-log quota and block_for(60 s): the penalty box.
-- Assembled by LimiterScript::for_quotas (src/store/redis/script.rs) from the
-- files in lua/; everything below this header is sent byte for byte
-- (SCRIPT LOAD, then EVALSHA 4b926be470dad6510b7d52eaf514ab5246508096).
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
local S = {}
S[2] = function(key, n, period, burst, interval, cost, nonce, apply)
local now = NOW
local ok, rem, reset, retry, delay
do
-- SlidingWindowLog: the request times (µs), one per unit of cost. Exact: at
-- most n requests with a time in (now - period, now]. An admitted request is
-- logged at now, or at the newest logged time if that is later (a clock that
-- went back), so the times stay sorted; those that left the window are
-- dropped when the next request is logged, so a log holds at most n times.
-- Two layouts, by the log's length:
-- * up to 32 times: one string of 7-byte little-endian integers, oldest
--   first, read with one GET and written with one SET … PX (a list takes a
--   command per end it reads and one more for its TTL);
-- * longer: a list of decimal times, newest first (LLEN, LINDEX at both
--   ends, LPUSH, LTRIM, PEXPIRE: the same commands at any length, where
--   reading and rewriting a string costs Redis about 36 ns per time).
-- A log becomes a list when a request would take it past 32 times, and stays
-- one until it expires. GET of a list answers WRONGTYPE: that is the test.
local old = now - period
local log = redis.pcall('GET', key)
local list = type(log) == 'table'
local sunpack = struct.unpack
-- len: the times logged; c: those in the window (the newest c); head: the
-- newest; tail: the oldest (read for a list); to_list: a string log's
-- conversion (lua/log_to_list.lua)
local len, c, head, tail, to_list = 0, 0, old, nil, nil
if list then
  len = redis.call('LLEN', key)
  if len > 0 then
    head = tonumber(redis.call('LINDEX', key, 0))
    tail = tonumber(redis.call('LINDEX', key, -1))
    c = len
    if tail <= old then
      -- the window holds entries [0, c): gallop from the tail, then bisect
      local lo, hi, step = 0, len - 1, 1
      while hi - step >= lo do
        local i = hi - step
        if tonumber(redis.call('LINDEX', key, i)) <= old then
          hi, step = i, step * 2
        else
          lo = i + 1
          break
        end
      end
      while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        if tonumber(redis.call('LINDEX', key, mid)) <= old then hi = mid else lo = mid + 1 end
      end
      c = lo
    end
  end
elseif log then
  len = #log / 7
  head = sunpack('<I7', log, #log - 6)
  c = len
  if sunpack('<I7', log) <= old then
    -- bisect for the oldest time in the window (none: c = 0)
    local lo, hi = 1, len
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if sunpack('<I7', log, mid * 7 + 1) <= old then lo = mid + 1 else hi = mid end
    end
    c = len - lo
  end
end
reset = 0
if c > 0 then reset = head + period - now end
if cost > n or c + cost > n then
  ok, rem, retry, delay = 0, n - c, -1, 0
  if cost <= n then
    -- the (c + cost - n)-th oldest time in the window must leave it first:
    -- the (n - cost + 1)-th newest
    if list then
      -- (a full log's oldest or newest time is read already)
      local leaving = tail
      if n - cost == 0 then
        leaving = head
      elseif n - cost ~= len - 1 then
        leaving = tonumber(redis.call('LINDEX', key, n - cost))
      end
      retry = leaving + period - now
    else
      retry = sunpack('<I7', log, (len - 1 - n + cost) * 7 + 1) + period - now
    end
  end
  if reset > 0 and redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, fmt('%d', ceil(reset / 1000) + GRACE))
  end
else
  if cost > 0 then
    local t = now
    if head > t then t = head end
    reset = t + period - now
    if apply then
      local ttl = PERIOD_MS
      if reset ~= period or GRACE ~= 0 or not ttl then
        ttl = fmt('%d', ceil(reset / 1000) + GRACE)
      end
      if list then
        -- the push first: under maxmemory Redis refuses it before anything is dropped
        local s = fmt('%d', t)
        if cost == 1 then
          redis.call('LPUSH', key, s)
        else
          local i = 0
          while i < cost do
            local batch, j = {}, 0
            while j < 256 and i < cost do
              j, i = j + 1, i + 1
              batch[j] = s
            end
            redis.call('LPUSH', key, unpack(batch))
          end
        end
        if c < len then redis.call('LTRIM', key, 0, c + cost - 1) end
        redis.call('PEXPIRE', key, ttl)
      elseif c + cost <= 32 then
        local s = struct.pack('<I7', t)
        if cost > 1 then s = string.rep(s, cost) end
        -- the times that left the window are dropped
        if c == 0 then
          log = s
        elseif c < len then
          log = string.sub(log, (len - c) * 7 + 1) .. s
        else
          log = log .. s
        end
        -- one SET: under maxmemory Redis refuses it whole
        redis.call('SET', key, log, 'PX', ttl)
      else
        -- the log becomes a list (lua/log_to_list.lua, after this): the
        -- times still in the window, then this request's
        to_list = { from = len - c, len = len, count = cost, t = t, ttl = ttl }
      end
    end
  end
  ok, rem, retry, delay = 1, n - c - cost, -1, 0
end
-- The end of the sliding log's decision and adjust
-- (lua/sliding_window_log.lua, lua/adjust_sliding_window_log.lua): a string
-- log that a write would take past 32 times becomes a list. `to_list` (nil:
-- no change) says what goes in it, oldest first: the times of `log` from
-- the `from`-th (0-based) of its `len`, then `count` times `t`; `ttl` is
-- its TTL in ms, as text.
if to_list then
  local l = to_list
  local items, j = {}, 0
  for i = l.from, l.len - 1 do
    j = j + 1
    items[j] = fmt('%d', struct.unpack('<I7', log, i * 7 + 1))
  end
  local s = fmt('%d', l.t)
  for _ = 1, l.count do
    j = j + 1
    items[j] = s
  end
  redis.call('DEL', key)
  for i = 1, j, 256 do
    local r = redis.pcall('LPUSH', key, unpack(items, i, math.min(i + 255, j)))
    if type(r) == 'table' then
      -- refused (maxmemory): the string is put back, the call fails
      if log then redis.pcall('SET', key, log, 'PX', l.ttl) else redis.pcall('DEL', key) end
      error(r)
    end
  end
  redis.call('PEXPIRE', key, l.ttl)
end
end
return ok, rem, reset, retry, delay
end
S[6] = function(key, n, period, burst, interval, cost, nonce, apply)
local now = NOW
local ok, rem, reset, retry, delay
do
-- Gcra: token-bucket-equivalent policing in one key (tat.lua follows); an
-- admitted request proceeds at once.
local queue = false
-- The value of a TAT key (Gcra, TokenBucket, LeakyBucket), read at the start
-- of the decision (tat.lua), the give-back (give_back_tat.lua) and the adjust
-- (adjust_tat.lua) blocks. An unnamed quota's key names its count and period,
-- hence its interval: one integer, the TAT. A named quota (or a plan's) keeps
-- its key when its rate changes (the arguments say so with a negative
-- interval), so its value also holds the interval it was written under: 12
-- bytes, the interval plus 2^39 (5 bytes, big-endian: the first byte has its
-- top bit set, so the value never reads as a number), then the TAT (7 bytes,
-- little-endian, signed); from an interval of 2^39 us (6.4 days) on, 13 bytes
-- (6 for the interval, plus 2^47). `tf`, `tm`: how to write it back.
-- A TAT written under another interval `iv` (the limits changed) is
-- rescaled: the units it still owes, rounded up, are kept at the new
-- interval (at most 2^50 us); `moved` says so, for the block to write it
-- down. Rounded up, a raised limit admits every request the old one would
-- have, a lowered one none the new one would not (see README, "Changing
-- limits while running").
local tagged, tf, tm = interval < 0, nil, nil
if tagged then
  interval = -interval
  tf, tm = '>I5<i7', 549755813888
  if interval >= tm then tf, tm = '>I6<i7', 140737488355328 end
end
local v = redis.call('GET', key)
local tat, iv, moved = tonumber(v), interval, false
if v and not tat then
  if #v == 12 then
    iv, tat = struct.unpack('>I5<i7', v)
    iv = iv - 549755813888
  else
    iv, tat = struct.unpack('>I6<i7', v)
    iv = iv - 140737488355328
  end
  if iv ~= interval and tat > now then
    local owed = ceil((tat - now) / iv) * interval
    if owed > 1125899906842624 then owed = 1125899906842624 end
    tat, moved = now + owed, tagged
  end
end
-- Gcra, TokenBucket and LeakyBucket: the theoretical arrival time (TAT; for
-- the token bucket, the time the bucket is full again). A request of `cost`
-- pushes the TAT by cost * interval and is allowed if the new TAT is at most
-- burst * interval ahead of now. `queue` (set by gcra.lua, token_bucket.lua or
-- leaky_bucket.lua just before this block) is true for the LeakyBucket: same
-- admission, but the request is told to wait until its slot (delay).
--
-- It follows tat_value.lua, which reads the value (`tat`, rescaled if its
-- interval changed: `moved`).
if not tat or tat < now then tat = now end
local tau = burst * interval
local new_tat = tat + cost * interval
if cost > burst or new_tat - now > tau then
  ok, rem, reset, retry, delay = 0, math.floor((now + tau - tat) / interval), tat - now, -1, 0
  if cost <= burst then retry = new_tat - tau - now end
  if moved then
    redis.call('SET', key, struct.pack(tf, interval + tm, tat), 'PX', fmt('%d', ceil(reset / 1000) + GRACE))
  elseif reset > 0 and redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, fmt('%d', ceil(reset / 1000) + GRACE))
  end
else
  if apply and cost > 0 then
    local val
    if tagged then val = struct.pack(tf, interval + tm, new_tat) else val = fmt('%d', new_tat) end
    redis.call('SET', key, val, 'PX', fmt('%d', ceil((new_tat - now) / 1000) + GRACE))
  elseif moved then
    redis.call('SET', key, struct.pack(tf, interval + tm, tat), 'PX', fmt('%d', ceil((tat - now) / 1000) + GRACE))
  end
  ok, rem, reset, retry, delay = 1, math.floor((now + tau - new_tat) / interval), new_tat - now, -1, 0
  if queue and cost > 0 then delay = tat - now end
end
end
return ok, rem, reset, retry, delay
end
-- Several quotas, all-or-nothing. KEYS: one per quota. ARGV: now ('T' = Redis's
-- clock), cost, then per quota: strategy id, count, period, burst, interval
-- (microseconds), then the nonce when a strategy needs one.
-- Reply: one string of integers: all_ok, then per quota ok, remaining,
-- reset_after, retry_after, delay.
-- Every quota is checked before any is consumed.
local cost = tonumber(ARGV[2])
local nonce = ARGV[3 + 5 * (#KEYS - 1)]

local function run(i, c, apply)
  local o = 2 + (i - 1) * 5
  return S[tonumber(ARGV[o + 1])](KEYS[i], tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]),
    tonumber(ARGV[o + 4]), tonumber(ARGV[o + 5]), c, nonce, apply)
end

local nq = (#KEYS - 1)
local res = {}
local all = 1
for i = 1, nq do
  res[i] = { run(i, cost, false) }
  if res[i][1] == 0 then all = 0 end
end
if all == 1 and cost > 0 then
  for i = 1, nq do res[i] = { run(i, cost, true) } end
elseif all == 0 then
  -- nothing is consumed: quotas that would allow report their current state
  for i = 1, nq do
    if res[i][1] == 1 then
      res[i] = { run(i, 0, false) }
    end
  end
end
-- a denial starts a block (lua/block.lua)
if all == 0 and cost > 0 and BLOCK_US > 0 then
redis.call('SET', BK, fmt('%d', NOW + BLOCK_US), 'PX', fmt('%d', ceil(BLOCK_US / 1000) + GRACE))
for i = 1, nq do
local r = res[i]
if r[1] == 0 and r[4] >= 0 and r[4] < BLOCK_US then r[4] = BLOCK_US end
end
end
local out = { tostring(all) }
for i = 1, nq do
  local r = res[i]
  out[i + 1] = string.format('%d %d %d %d %d', r[1], r[2], r[3], r[4], r[5])
end
return table.concat(out, ' ')
