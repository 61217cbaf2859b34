-- GENERATED FILE, do not edit. The script this crate sends to Redis for a
-- limiter with one sliding-window-log quota, several decisions per call.
-- Assembled by LimiterScript::for_quotas (src/store/redis/script.rs) from the
-- files in lua/; everything below this header is sent byte for byte
-- (SCRIPT LOAD, then EVALSHA eec3e76ea0c87921ad0f3798058d018d82279b3a).
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
-- One-quota decisions, several per call (src/store/redis/batch.rs): the
-- prelude, then this file with the strategy's block spliced in at the marker,
-- inside a loop over the decisions; each is decided exactly as single.lua
-- would decide it in a call of its own (same keys, same answers, same TTLs).
-- KEYS: one per decision. ARGV: 'T' for Redis's clock (TIME, read once per
-- call) or 'M' (each decision's own time follows), then two letters: 'c' if
-- each decision's cost follows (else '1': every cost is 1, none is sent),
-- 'n' if each decision's nonce follows (else '-'); the quota's two numbers
-- (as in single.lua), its period in ms (PERIOD_MS), then per decision its
-- cost ('c'), its time ('M'), its nonce ('n').
-- Reply: one entry per decision, single.lua's reply or 'E' and an error
-- (lua/batch_end.lua).
local N1, N2 = struct.unpack('<dd', ARGV[3])
PERIOD_MS = ARGV[4]
local COSTS, NONCES = string.sub(ARGV[2], 1, 1) == 'c', string.sub(ARGV[2], 2, 2) == 'n'
local AN, AT = 0, 0
if COSTS then AN = 1 end
if MANUAL then AN = AN + 1; AT = AN end
if NONCES then AN = AN + 1 end
local out, done = {}, 0
local function run(first)
  for d = first, #KEYS do
    local a = 4 + (d - 1) * AN
    local key, cost, nonce, apply, now = KEYS[d], 1, nil, true, NOW
    -- (each decision its own copy: a block may change them, as tat_value.lua
    -- does a tagged interval's sign)
    local n, period, burst, interval
    if READS_BURST then burst, interval = N1, N2 else n, period = N1, N2 end
    if COSTS then
      local c = ARGV[a + 1]
      if c ~= '1' then cost = tonumber(c) end
    end
    if MANUAL then now = tonumber(ARGV[a + AT]) end
    if NONCES then nonce = ARGV[a + AN] end
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
    if ok == 1 and delay == 0 then
      out[d] = fmt('1 1 %d %d -1 0', rem, reset)
    else
      out[d] = fmt('%d %d %d %d %d %d', ok, ok, rem, reset, retry, delay)
    end
    done = d
  end
end
-- The end of a batch script (lua/batch_one.lua, lua/batch_fast.lua): run(d)
-- decides the decisions from d on, each entry of `out` its reply, `done` the
-- last one decided. An error (a redis.call refused, say WRONGTYPE) fails that
-- decision alone: its entry is 'E' and the error, and the next ones run, in
-- one pcall per error rather than one per decision. What the failed decision
-- wrote before its error stays, as in a call of its own. READONLY (the node
-- is a replica now: a failover) fails the whole call instead, so that the
-- client goes to the new primary.
local first = 1
while true do
  local finished, err = pcall(run, first)
  if finished then break end
  if type(err) == 'table' then err = err.err end
  err = tostring(err)
  if string.sub(err, 1, 8) == 'READONLY' then return redis.error_reply(err) end
  done = done + 1
  out[done] = 'E' .. err
  first = done + 1
end
return out
