-- GENERATED FILE, do not edit. The script this crate sends to Redis for a
-- limiter with a fixed-window, a sliding-window-log and a leaky-bucket quota whose
-- denials record on the quotas over (on_denial(OnDenial::RecordIfOver)).
-- Assembled by LimiterScript::for_quotas (src/store/redis/script.rs) from the
-- files in lua/; everything below this header is sent byte for byte
-- (SCRIPT LOAD, then EVALSHA 393151764fd29021a84221e207eacc16de82069a).
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
local S = {}
S[1] = function(key, n, period, burst, interval, cost, nonce, apply)
local now = NOW
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
return ok, rem, reset, retry, delay
end
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
S[5] = function(key, n, period, burst, interval, cost, nonce, apply)
local now = NOW
local ok, rem, reset, retry, delay
do
-- LeakyBucket: a queue of `burst` slots draining one request every `interval`,
-- stored as one timestamp (tat.lua follows): GCRA admission, and an admitted
-- request gets a delay until its slot.
local queue = true
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
local A, C = {}, {}
A[1] = function(key, n, period, burst, interval, units)
local now = NOW
do
-- Adjust of FixedWindow (penalize, reward, a settle's excess): units > 0
-- charges the current window, past n if need be (a debt: the window denies
-- until it ends; a debt is not carried past the window's end), starting a
-- window if there is none; units < 0 gives back, never below 0 (a count of 0
-- is no state). The key's TTL is kept, or set for a window it starts. A
-- count stays at most n plus what the rate repays in 2^50 us (top).
local top = n + math.floor(1125899906842624 / math.abs(interval))
if not MANUAL then
  local c = tonumber(redis.call('GET', key) or '0')
  if units > 0 then
    if c + units > top then units = top - c end
    if units > 0 then
      redis.call('INCRBY', key, fmt('%d', units))
      if c == 0 then redis.call('PEXPIRE', key, fmt('%d', ceil(period / 1000))) end
    end
  elseif c > 0 then
    if c + units <= 0 then
      redis.call('DEL', key)
    else
      redis.call('DECRBY', key, fmt('%d', -units))
    end
  end
else
  local st = redis.call('HMGET', key, 's', 'c')
  local s, c = tonumber(st[1]), tonumber(st[2])
  if not s or not c or now >= s + period then s, c = now, 0 end
  if units > 0 then
    if c + units > top then units = math.max(top - c, 0) end
    redis.call('HSET', key, 's', fmt('%d', s), 'c', fmt('%d', c + units))
    redis.call('PEXPIRE', key, fmt('%d', ceil((s + period - now) / 1000) + GRACE))
  elseif c > 0 then
    if c + units <= 0 then
      redis.call('DEL', key)
    else
      redis.call('HINCRBY', key, 'c', fmt('%d', units))
    end
  end
end
end
end
A[2] = function(key, n, period, burst, interval, units)
local now = NOW
do
-- Adjust of SlidingWindowLog: units > 0 logs that many times (at most
-- n + 1: more would leave the window at the same time) at now, or at the
-- newest logged time if later, past n if need be (a debt: denied, even a
-- cost of 0, until they leave the window), keeping the n + 1 newest times
-- (admission reads no older one, so repeated charges never grow a log past
-- n + 1); units < 0 drops that many newest times (an empty log is no
-- key; the TTL is kept). Either layout (lua/sliding_window_log.lua); a
-- string that would pass 32 times becomes a list.
local log = redis.pcall('GET', key)
local to_list
if type(log) == 'table' then
  if units > 0 then
    if units > n + 1 then units = n + 1 end
    local t = now
    local head = tonumber(redis.call('LINDEX', key, 0))
    if head and head > t then t = head end
    local s = fmt('%d', t)
    local i = 0
    while i < units do
      local batch, j = {}, 0
      while j < 256 and i < units do
        j, i = j + 1, i + 1
        batch[j] = s
      end
      redis.call('LPUSH', key, unpack(batch))
    end
    redis.call('LTRIM', key, '0', fmt('%d', n))
    redis.call('PEXPIRE', key, fmt('%d', ceil((t + period - now) / 1000) + GRACE))
  else
    redis.call('LTRIM', key, fmt('%d', -units), '-1')
  end
elseif units > 0 then
  if units > n + 1 then units = n + 1 end
  local t, len = now, 0
  if log then
    len = #log / 7
    local head = struct.unpack('<I7', log, #log - 6)
    if head > t then t = head end
  end
  local ttl = fmt('%d', ceil((t + period - now) / 1000) + GRACE)
  -- (the oldest times past the n + 1 newest are dropped)
  local from = len + units - n - 1
  if from < 0 then from = 0 end
  if len + units <= 32 then
    local s = (log or '') .. string.rep(struct.pack('<I7', t), units)
    redis.call('SET', key, string.sub(s, from * 7 + 1), 'PX', ttl)
  else
    -- the log becomes a list (lua/log_to_list.lua, after this): its times,
    -- then the charge's
    to_list = { from = from, len = len, count = units, t = t, ttl = ttl }
  end
elseif log and units < 0 then
  local keep = #log - 7 * -units
  local pttl = redis.call('PTTL', key)
  if keep <= 0 or pttl == 0 then
    redis.call('DEL', key)
  elseif pttl > 0 then
    redis.call('SET', key, string.sub(log, 1, keep), 'PX', fmt('%d', pttl))
  else
    redis.call('SET', key, string.sub(log, 1, keep))
  end
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
end
C[5] = function(key, n, period, burst, interval, units)
local now = NOW
do
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
-- Adjust of Gcra and TokenBucket, and the charge of LeakyBucket (run for
-- units > 0 only: pushing the end of its queue moves no slot already
-- promised, giving back would let a later request jump ahead of them).
-- units > 0 pushes the TAT by units * interval, past the burst if need be (a
-- debt: denied until the TAT is back within the burst, repaid at the quota's
-- rate, up to 2^50 us past now); units < 0 takes it back, never below now
-- (never more than the burst left). It follows tat_value.lua, which reads
-- the value (rescaled if its interval changed).
if not tat or tat < now then tat = now end
local t = tat + units * interval
-- a debt reaches at most 2^50 us past now (lua/give_back.lua)
if t > now + 1125899906842624 then t = now + 1125899906842624 end
if t <= now then
  redis.call('DEL', key)
else
  local val
  if tagged then val = struct.pack(tf, interval + tm, t) else val = fmt('%d', t) end
  redis.call('SET', key, val, 'PX', fmt('%d', ceil((t - now) / 1000) + GRACE))
end
end
end
-- a denial records (lua/record.lua)
local RECORD, RECORDED = 1, 0
local SHADOW = { false, false, false }
-- Several quotas, all-or-nothing. KEYS: one per quota. ARGV: now ('T' = Redis's
-- clock), cost, then per quota: strategy id, count, period, burst, interval
-- (microseconds), then the nonce when a strategy needs one.
-- Reply: one string of integers: all_ok, then per quota ok, remaining,
-- reset_after, retry_after, delay.
-- Every quota is checked before any is consumed.
local cost = tonumber(ARGV[2])
local nonce = ARGV[3 + 5 * #KEYS]

local function run(i, c, apply)
  local o = 2 + (i - 1) * 5
  return S[tonumber(ARGV[o + 1])](KEYS[i], tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]),
    tonumber(ARGV[o + 4]), tonumber(ARGV[o + 5]), c, nonce, apply)
end

local nq = #KEYS
local res = {}
local all = 1
for i = 1, nq do
  res[i] = { run(i, cost, false) }
  if res[i][1] == 0 then all = 0 end
end
if all == 1 and cost > 0 then
  for i = 1, nq do res[i] = { run(i, cost, true) } end
elseif all == 0 then
  -- a denial records its cost (RateLimiterBuilder::on_denial; in the scripts
  -- of recording limiters only, which replace multi.lua's branch with this
  -- file): RECORD 1 on each enforced quota that denies it, 2 on every
  -- enforced quota, as RateLimiter::penalize would (lua/give_back.lua: A[<id>],
  -- or C[<id>] for a charge only; at most what the quota's rate repays in
  -- 2^50 us); a recorded quota then reports its state after, as a check of the
  -- same cost would (retry: when the cost fits again). Quotas that would
  -- allow report their current state (cost 0), as multi.lua's do.
  for i = 1, nq do
    if cost > 0 and not SHADOW[i] and (RECORD == 2 or res[i][1] == 0) then
      local o = 2 + (i - 1) * 5
      local id, iv = tonumber(ARGV[o + 1]), tonumber(ARGV[o + 5])
      local u = math.floor(1125899906842624 / math.abs(iv))
      if u > cost then u = cost end
      local n, period, burst = tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4])
      local done = false
      if A[id] then
        A[id](KEYS[i], n, period, burst, iv, u)
        done = true
      elseif C[id] then
        C[id](KEYS[i], n, period, burst, iv, u)
        done = true
      end
      if done then
        RECORDED = 2
        res[i] = { run(i, cost, false) }
      end
    end
    if res[i][1] == 1 then
      res[i] = { run(i, 0, false) }
    end
  end
end
local out = { tostring(all + RECORDED) }
for i = 1, nq do
  local r = res[i]
  out[i + 1] = string.format('%d %d %d %d %d', r[1], r[2], r[3], r[4], r[5])
end
return table.concat(out, ' ')
