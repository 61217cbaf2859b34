-- GENERATED FILE, do not edit. The script this crate sends to Redis for a
-- limiter with one quota of every strategy that gives back and local budgets: the give-back.
-- Assembled by LimiterScript::for_quotas (src/store/redis/script.rs) from the
-- files in lua/; everything below this header is sent byte for byte
-- (SCRIPT LOAD, then EVALSHA 081519c7945b53c6ed4c6d94376b698bd8cd00fd).
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
local G = {}
G[1] = function(key, n, period, burst, interval, units, at, fin)
local now = NOW
do
-- Give-back of FixedWindow: only into the take's own window, never below 0
-- (a count given back to 0 is no state: the key goes).
--
-- On Redis's clock the key is a plain counter that holds no start: it is the
-- take's window if it expires when that window ends, at fin (the key's TTL
-- plus the time it was read, in whole ms), give or take half a period, at
-- most a second. The key of any later window expires at least a period after
-- fin, so a give-back that arrives after the window rolled over changes
-- nothing; the slack covers the rounding and a script's TIME lagging the
-- instant Redis reads TTLs against (once per script): a script descheduled
-- on a loaded machine, which 2 ms of slack did not cover. Periods of 4 ms or
-- less give nothing back. With a manual clock the hash holds the window's
-- start: it must be the take's (fin = start + period).
if not MANUAL then
  local c = tonumber(redis.call('GET', key) or '0')
  local pm = ceil(period / 1000)
  if c > 0 and pm > 4 then
    local ttl = redis.call('PTTL', key)
    local slack = math.min(math.floor(pm / 2), 1000)
    if ttl > 0 and math.floor(now / 1000) + ttl <= math.floor(fin / 1000) + slack then
      if units >= c then
        redis.call('DEL', key)
      else
        redis.call('DECRBY', key, fmt('%d', units))
      end
    end
  end
else
  local st = redis.call('HMGET', key, 's', 'c')
  local s, c = tonumber(st[1]), tonumber(st[2])
  if s and c and c > 0 and s + period == fin and now < fin then
    if units >= c then
      redis.call('DEL', key)
    else
      redis.call('HINCRBY', key, 'c', fmt('%d', -units))
    end
  end
end
end
end
G[2] = function(key, n, period, burst, interval, units, at, fin)
local now = NOW
do
-- Give-back of SlidingWindowLog: the take logged its units at one time,
-- fin - period (its reset_after is that time plus the period, from its NOW);
-- up to `units` times of exactly that are removed, newest first, while it is
-- still in the window (equal times are interchangeable). Exact. An empty log
-- is no key; the TTL is kept. Either layout (lua/sliding_window_log.lua).
local t = fin - period
if t > now - period then
  local log = redis.pcall('GET', key)
  if type(log) == 'table' then
    redis.call('LREM', key, fmt('%d', units), fmt('%d', t))
  elseif log then
    local sunpack = struct.unpack
    local len = #log / 7
    -- hi: the first time after t (len: none)
    local lo, hi = 0, len
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if sunpack('<I7', log, mid * 7 + 1) <= t then lo = mid + 1 else hi = mid end
    end
    local from = hi
    while from > 0 and hi - from < units and sunpack('<I7', log, (from - 1) * 7 + 1) == t do
      from = from - 1
    end
    if from < hi then
      log = string.sub(log, 1, from * 7) .. string.sub(log, hi * 7 + 1)
      local pttl = redis.call('PTTL', key)
      if #log == 0 or pttl == 0 then
        redis.call('DEL', key)
      elseif pttl > 0 then
        redis.call('SET', key, log, 'PX', fmt('%d', pttl))
      else
        redis.call('SET', key, log)
      end
    end
  end
end
end
end
G[3] = function(key, n, period, burst, interval, units, at, fin)
local now = NOW
do
-- Give-back of SlidingWindowCounter: only while now is still in the take's
-- aligned window (floor(at / period)) and the key holds that window; its
-- count goes down by at most what it holds, the previous window's count and
-- the TTL are kept. (Once the window has passed, its count weighs on the
-- next window as the previous one: nothing is given back then.)
local w = math.floor(now / period)
if w == math.floor(at / period) then
  local packed = not MANUAL and n < 2097152 and period >= 1000
  local v = redis.call('GET', key)
  local x = tonumber(v)
  local sw, c, p
  if x then
    if packed and (w - x % 1024) % 1024 == 0 then
      sw = w
      x = math.floor(x / 1024)
      c = math.floor(x / 2097152)
      p = x - c * 2097152
    end
  elseif v then
    local a, b, e = string.match(v, '^(%d+) (%d+) (%d+)$')
    sw, c, p = tonumber(a), tonumber(b), tonumber(e)
  end
  if sw == w and c and p and c > 0 then
    local g = units
    if g > c then g = c end
    if packed and p < 2097152 then
      redis.call('SET', key, fmt('%d', ((c - g) * 2097152 + p) * 1024 + w % 1024), 'KEEPTTL')
    else
      redis.call('SET', key, fmt('%d %d %d', w, c - g, p), 'KEEPTTL')
    end
  end
end
end
end
G[4] = function(key, n, period, burst, interval, units, at, fin)
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
-- Give-back of Gcra and TokenBucket. The take pushed the TAT to at least
-- `fin`, so its units are the last ones before fin; the part of the `units`
-- unspent that is still ahead of now is taken off: at most units * interval
-- and at most fin - now (what has drained since is no longer in the TAT:
-- giving it back would admit more than the rate). Never below now (never
-- more than the burst left); exact while fin - now >= units * interval.
-- It follows tat_value.lua, which reads the value; a TAT written under
-- another interval (the limits changed since the take, whose fin is in that
-- interval's time) is rescaled there, and gives back the whole units of that
-- part, at the new interval.
if tat and tat > now and fin > now then
  local credit = units * iv
  if fin - now < credit then credit = fin - now end
  if iv ~= interval then credit = math.floor(credit / iv) * interval end
  local t = tat - credit
  if t <= now then
    redis.call('DEL', key)
  else
    local val
    if tagged then val = struct.pack(tf, interval + tm, t) else val = fmt('%d', t) end
    redis.call('SET', key, val, 'PX', fmt('%d', ceil((t - now) / 1000) + GRACE))
  end
end
end
end
G[6] = function(key, n, period, burst, interval, units, at, fin)
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
-- Give-back of Gcra and TokenBucket. The take pushed the TAT to at least
-- `fin`, so its units are the last ones before fin; the part of the `units`
-- unspent that is still ahead of now is taken off: at most units * interval
-- and at most fin - now (what has drained since is no longer in the TAT:
-- giving it back would admit more than the rate). Never below now (never
-- more than the burst left); exact while fin - now >= units * interval.
-- It follows tat_value.lua, which reads the value; a TAT written under
-- another interval (the limits changed since the take, whose fin is in that
-- interval's time) is rescaled there, and gives back the whole units of that
-- part, at the new interval.
if tat and tat > now and fin > now then
  local credit = units * iv
  if fin - now < credit then credit = fin - now end
  if iv ~= interval then credit = math.floor(credit / iv) * interval end
  local t = tat - credit
  if t <= now then
    redis.call('DEL', key)
  else
    local val
    if tagged then val = struct.pack(tf, interval + tm, t) else val = fmt('%d', t) end
    redis.call('SET', key, val, 'PX', fmt('%d', ceil((t - now) / 1000) + GRACE))
  end
end
end
end
G[8] = function(key, n, period, burst, interval, units, at, fin)
local now = NOW
do
-- Give-back of an aligned FixedWindow (Quota::aligned): only into the take's
-- own window (the hash holds its start: fin = start + period), never below 0
-- (a count given back to 0 is no state: the key goes). The same as
-- give_back_fixed_window.lua under a manual clock, on every clock.
local st = redis.call('HMGET', key, 's', 'c')
local s, c = tonumber(st[1]), tonumber(st[2])
if s and c and c > 0 and s + period == fin and now < fin then
  if units >= c then
    redis.call('DEL', key)
  else
    redis.call('HINCRBY', key, 'c', fmt('%d', -units))
  end
end
end
end
G[9] = function(key, n, period, burst, interval, units, at, fin)
local now = NOW
do
-- Give-back of a calendar FixedWindow (Quota::calendar): only into the take's
-- own window, never below 0 (a count given back to 0 is no state: the key
-- goes). The hash holds the window's end (e), which is the take's fin (its
-- reset_after runs to that end), so no bounds are needed: a key of a later
-- window (a month rolled over since the take) is left as it is.
local st = redis.call('HMGET', key, 'e', 'c')
local e, c = tonumber(st[1]), tonumber(st[2])
if e and c and c > 0 and e == fin and now < fin then
  if units >= c then
    redis.call('DEL', key)
  else
    redis.call('HINCRBY', key, 'c', fmt('%d', -units))
  end
end
end
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
-- Gives back a local budget's unspent units (src/limiter/local_budget.rs), on every
-- quota of the limiter, each as its strategy allows. KEYS: one per quota.
-- ARGV: now ('T' = Redis's clock), units, at (the take's time: its script's
-- NOW), then per quota: strategy id, count, period, burst, interval, then per
-- quota: fin, the take's time plus that quota's reset_after in its reply,
-- or -1 for a quota the take did not consume (a shadow quota that would have
-- denied, src/limiter/joint.rs), which is left as it is.
-- Each G[<id>] block reads key, n, period, burst, interval, units, at, fin
-- and now, and never raises what is left above the limit, never makes a
-- count negative, never touches a window later than the take's, and keeps
-- the key's TTL (or sets the one its new state needs).
--
-- With ARGV[3] = 'A' it is an adjust instead (src/settle.rs: penalize,
-- reward, a settle's excess): each A[<id>] block reads key, n, period, burst,
-- interval, units (> 0: charge, past the limit if need be; < 0: give back,
-- never above the limit; at most 2^50 us of the quota's rate either way,
-- and no state holds a debt longer than that) and now; no fins follow. A
-- C[<id>] block (a strategy that takes a charge but gives nothing back: the
-- leaky bucket) reads the same, and runs for a charge only. A strategy
-- without a block of the kind asked is left as it is.
--
-- With ARGV[3] = 'S' it sets what is left (src/settle.rs: set_remaining):
-- each quota with an A[<id>] block starts afresh (DEL) and is charged the
-- units that follow the quotas, one per quota (its capacity less the
-- remaining asked for); ARGV[2] is unused.
local units, at, set = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[3] == 'S'
local nq = #KEYS
for i = 1, nq do
  local o = 3 + (i - 1) * 5
  local id = tonumber(ARGV[o + 1])
  local f = G[id]
  if not at then
    f = A[id]
    -- (a charge only: in the set mode units is 0)
    if not f and units > 0 then f = C[id] end
  end
  local last = tonumber(ARGV[3 + 5 * nq + i])
  if f and set then
    redis.call('DEL', KEYS[i])
    if last > 0 then
      f(KEYS[i], tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4]),
        tonumber(ARGV[o + 5]), last)
    end
  elseif f and not (at and last < 0) then
    local u = units
    if not at then
      -- an adjust moves a quota by at most what its rate repays in 2^50 us
      -- (about 35.7 years; src/settle.rs, MAX_DEBT): Lua numbers are
      -- doubles, exact below 2^53, and times are us since 1970 (2^50.6)
      local cap = math.floor(1125899906842624 / math.abs(tonumber(ARGV[o + 5])))
      if u > cap then u = cap elseif u < -cap then u = -cap end
    end
    f(KEYS[i], tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4]),
      tonumber(ARGV[o + 5]), u, at, last)
  end
end
return 'OK'
