-- GENERATED FILE, do not edit. The script this crate sends to Redis for a
-- limiter with any quotas, several limiters and keys decided together, all or nothing,
-- where a part's denial may record (AllOrNothing, OnDenial): the joint script
-- with every strategy's adjust function but concurrency's.
-- Assembled by LimiterScript::for_quotas (src/store/redis/script.rs) from the
-- files in lua/; everything below this header is sent byte for byte
-- (SCRIPT LOAD, then EVALSHA 58efb5e8425915a73d962f8ea5c83c302398ac30).
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
S[3] = function(key, n, period, burst, interval, cost, nonce, apply)
local now = NOW
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
return ok, rem, reset, retry, delay
end
S[4] = function(key, n, period, burst, interval, cost, nonce, apply)
local now = NOW
local ok, rem, reset, retry, delay
do
-- TokenBucket: `burst` tokens, one more every `interval`, stored as one
-- integer: the time the bucket is full again (tat.lua follows). With t tokens
-- counted at time s, that time is s + (burst - t) * interval; the tokens at
-- `now` are burst - ceil((full - now) / interval). Taking `cost` tokens pushes
-- it by cost * interval, which is the GCRA's theoretical arrival time: same
-- admission, remaining, reset and retry; an admitted request proceeds at once.
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
S[8] = function(key, n, period, burst, interval, cost, nonce, apply)
local now = NOW
local ok, rem, reset, retry, delay
do
-- FixedWindow aligned to the epoch (Quota::aligned): the windows are
-- [k * period, (k + 1) * period) in the clock's microseconds since the Unix
-- epoch (Redis's TIME, or the manual or caller clock's time), as
-- envoyproxy/ratelimit counts them: a window of one minute runs from :00 to
-- :00 on every key at once.
--
-- The key is a hash {s = the window's start, c = its count} on every clock,
-- with a TTL of the rest of the window. A key of an earlier window (kept up to
-- a millisecond past its end by the TTL's rounding, or longer under a manual
-- clock, whose time need not follow TTLs) counts as no state; a window ahead
-- of now (the clock went back) stays the window until it ends.
local s = math.floor(now / period) * period
local st = redis.call('HMGET', key, 's', 'c')
local ws, c = tonumber(st[1]), tonumber(st[2])
if not ws or not c or ws < s then c = 0 else s = ws end
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
return ok, rem, reset, retry, delay
end
S[9] = function(key, n, period, burst, interval, cost, nonce, apply)
local now = NOW
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
A[3] = function(key, n, period, burst, interval, units)
local now = NOW
do
-- Adjust of SlidingWindowCounter: units > 0 adds to the current aligned
-- window's count, past n if need be (a debt: the estimate denies until it
-- weighs little enough, in the next window; no debt is carried further);
-- units < 0 takes off at most the current count. Read as the strategy's block
-- reads it; written with the TTL the new state needs.
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
  w = sw
elseif sw ~= w then
  c, p = 0, 0
end
local c2 = c + units
if c2 < 0 then c2 = 0 end
-- (at most n plus what the rate repays in 2^50 us: lua/give_back.lua)
local top = n + math.floor(1125899906842624 / math.abs(interval))
if c2 > top then c2 = math.max(c, top) end
local reset = 0
if c2 > 0 then reset = (w + 2) * period - now elseif p > 0 then reset = (w + 1) * period - now end
if reset <= 0 then
  redis.call('DEL', key)
else
  local ttl = fmt('%d', ceil(reset / 1000) + GRACE)
  if packed and p < 2097152 and c2 < 2097152 then
    redis.call('SET', key, fmt('%d', (c2 * 2097152 + p) * 1024 + w % 1024), 'PX', ttl)
  else
    redis.call('SET', key, fmt('%d %d %d', w, c2, p), 'PX', ttl)
  end
end
end
end
A[4] = function(key, n, period, burst, interval, units)
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
A[6] = function(key, n, period, burst, interval, units)
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
A[8] = function(key, n, period, burst, interval, units)
local now = NOW
do
-- Adjust of an aligned FixedWindow (Quota::aligned), as adjust_fixed_window.lua
-- does under a manual clock, on every clock: units > 0 charges the current
-- aligned window, past n if need be (a debt, not carried past the window's
-- end), starting it if there is none; units < 0 gives back, never below 0
-- (a count of 0 is no state). A count stays at most n plus what the rate
-- repays in 2^50 us (top).
local top = n + math.floor(1125899906842624 / math.abs(interval))
local s = math.floor(now / period) * period
local st = redis.call('HMGET', key, 's', 'c')
local ws, c = tonumber(st[1]), tonumber(st[2])
if not ws or not c or ws < s then c = 0 else s = ws end
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
A[9] = function(key, n, period, burst, interval, units)
local now = NOW
do
-- Adjust of a calendar FixedWindow (Quota::calendar), as
-- adjust_fixed_window_aligned.lua does in the window fixed_window_calendar.lua
-- picks (period and burst: the bounds the client sent, as there): units > 0
-- charges it, past n if need be (a debt, not carried past the window's end),
-- starting it if there is none; units < 0 gives back, never below 0 (a count
-- of 0 is no state). A count stays at most n plus what the rate repays in
-- 2^50 us (top).
local top = n + math.floor(1125899906842624 / math.abs(interval))
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
if units > 0 then
  if c + units > top then units = math.max(top - c, 0) end
  redis.call('HSET', key, 'e', fmt('%d', e), 'c', fmt('%d', c + units))
  redis.call('PEXPIRE', key, fmt('%d', ceil(left / 1000) + GRACE))
elseif c > 0 then
  if c + units <= 0 then
    redis.call('DEL', key)
  else
    redis.call('HINCRBY', key, 'c', fmt('%d', units))
  end
end
end
end
-- Several limiters decided together, all or nothing (src/limiter/joint.rs):
-- each part is one limiter's quotas on one user key, with its own cost and
-- clock. Follows the prelude (READS_TIME true) and every strategy's function
-- S[<id>] (as multi.lua's; no lease-holding strategy) and, in the script of
-- parts whose denial may record, its adjust function A[<id>] or C[<id>] (as
-- lua/give_back.lua's; else A and C are empty).
-- KEYS: every part's quota keys, part after part.
-- ARGV: [1] 'T' when a part is on Redis's clock (TIME is then read once, for
-- every such part), else a part's time; [2] '1' to consume (a denial
-- records), '0' to check only (nothing is consumed or recorded), 'R' for a
-- decision already denied (nothing is consumed; the denial records);
-- [3] the number of parts; then per part: its clock ('T' or its time in
-- microseconds), its cost, its number of quotas, what its denial records
-- (0 nothing, 1 on its quotas that deny, 2 on all its enforced quotas:
-- RateLimiterBuilder::on_denial), then per quota: strategy id, count,
-- period, burst, interval (as multi.lua), capacity, and 1 if it is a shadow
-- quota, else 0.
-- Reply: one string of integers: 1 if every part was admitted and consumed,
-- then per part: its verdict (1: every enforced quota allows) plus 2 if its
-- denial recorded, its NOW, then per quota: ok, remaining, reset_after,
-- retry_after, delay.
--
-- Every quota of every part is checked before any is consumed (as in
-- multi.lua). A key that several parts count in is checked with the units
-- the parts before it take of it added (capped just past its capacity: the
-- arithmetic stays exact), so the parts must fit together, not only each
-- alone. All admitted, every part is decided again in order, applied: each
-- quota's answer is then exactly that of the parts decided one after the
-- other (every strategy's admission adds up), every key written with its
-- strategy's own state and TTL. Denied (or checked only), nothing is
-- consumed: quotas that would allow report their current state (cost 0),
-- as in multi.lua. Denied (not checked only), a part that records has its
-- cost recorded, part after part, as lua/record.lua records one limiter's
-- (a quota that denies: as checked, with the parts before it on its key),
-- and a quota recorded on reports its state after (as a check of the
-- part's cost, capped just past the capacity, would).
local STORE_NOW = NOW
local APPLY, RECORDS = ARGV[2] == '1', ARGV[2] ~= '0'
local np = tonumber(ARGV[3])

-- a part's clock: the prelude's MANUAL, NOW and GRACE, which the strategy
-- functions read
local function clock(c)
  if c == 'T' then
    MANUAL, NOW, GRACE = false, STORE_NOW, 0
  else
    MANUAL, NOW, GRACE = true, tonumber(c), 60000
  end
end

-- the quota of key KEYS[k], its numbers from ARGV[o]
local function run(k, o, c, apply)
  return S[tonumber(ARGV[o])](KEYS[k], tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]),
    tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4]), c, '', apply)
end

-- where each part's arguments and keys start
local parts = {}
local a, k = 4, 0
for p = 1, np do
  local nq = tonumber(ARGV[a + 2])
  parts[p] = { c = ARGV[a], cost = tonumber(ARGV[a + 1]), nq = nq, rec = tonumber(ARGV[a + 3]),
    o = a + 4, k = k }
  a, k = a + 4 + 7 * nq, k + nq
end

local res, verdict, taken = {}, {}, {}
local all = 1
for p = 1, np do
  local part = parts[p]
  clock(part.c)
  local r, ok = {}, 1
  for i = 1, part.nq do
    local o, key = part.o + (i - 1) * 7, KEYS[part.k + i]
    local c = part.cost + (taken[key] or 0)
    local cap = tonumber(ARGV[o + 5])
    if c > cap then c = cap + 1 end
    r[i] = { run(part.k + i, o, c, false) }
    if r[i][1] == 0 and ARGV[o + 6] ~= '1' then ok = 0 end
  end
  if part.cost > 0 then
    -- what this part takes if admitted: every quota that would allow
    for i = 1, part.nq do
      if r[i][1] == 1 then
        local key = KEYS[part.k + i]
        taken[key] = (taken[key] or 0) + part.cost
      end
    end
  end
  res[p], verdict[p] = r, ok
  if ok == 0 then all = 0 end
end
if not APPLY then all = 0 end

local recorded = {}
for p = 1, np do
  local part = parts[p]
  clock(part.c)
  recorded[p] = 0
  local rec = RECORDS and all == 0 and part.cost > 0 and part.rec
  for i = 1, part.nq do
    local o = part.o + (i - 1) * 7
    if all == 1 then
      -- (a quota that would deny, a shadow one, writes nothing)
      res[p][i] = { run(part.k + i, o, part.cost, true) }
    else
      if rec and rec > 0 and ARGV[o + 6] ~= '1' and (rec == 2 or res[p][i][1] == 0) then
        local id, iv = tonumber(ARGV[o]), tonumber(ARGV[o + 4])
        local u = math.floor(1125899906842624 / math.abs(iv))
        if u > part.cost then u = part.cost end
        local n, period, burst = tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3])
        local done = false
        if A[id] then
          A[id](KEYS[part.k + i], n, period, burst, iv, u)
          done = true
        elseif C[id] then
          C[id](KEYS[part.k + i], n, period, burst, iv, u)
          done = true
        end
        if done then
          recorded[p] = 2
          local c, cap = part.cost, tonumber(ARGV[o + 5])
          if c > cap then c = cap + 1 end
          res[p][i] = { run(part.k + i, o, c, false) }
        end
      end
      if res[p][i][1] == 1 then
        res[p][i] = { run(part.k + i, o, 0, false) }
      end
    end
  end
end

local out = { tostring(all) }
for p = 1, np do
  local part = parts[p]
  clock(part.c)
  out[#out + 1] = fmt('%d %d', verdict[p] + recorded[p], NOW)
  for i = 1, part.nq do
    local r = res[p][i]
    out[#out + 1] = fmt('%d %d %d %d %d', r[1], r[2], r[3], r[4], r[5])
  end
end
return table.concat(out, ' ')
