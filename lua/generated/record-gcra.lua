-- GENERATED FILE, do not edit. The script this crate sends to Redis for a
-- limiter with one gcra quota whose denials record (on_denial(OnDenial::Record)):
-- single.lua, then lua/record_one.lua with its adjust block.
-- Assembled by LimiterScript::for_quotas (src/store/redis/script.rs) from the
-- files in lua/; everything below this header is sent byte for byte
-- (SCRIPT LOAD, then EVALSHA a5777882fbaae91e0d9b615fe4417edb6852785e).
-- Regenerate: UPDATE_GENERATED=1 cargo test --all-features --lib generated_scripts
local READS_TIME = true
local READS_BURST = true
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
-- (a recording limiter's: all four numbers, lua/record_one.lua)
n, period, burst, interval = struct.unpack('<dddd', ARGV[3])
local SENT_INTERVAL = interval
PERIOD_MS = ARGV[4]
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
-- A recording limiter of one quota (RateLimiterBuilder::on_denial): spliced
-- in after the strategy's block in single.lua, whose arguments then carry
-- all four numbers (count, period, burst, interval: four little-endian
-- doubles). A denial records its cost as RateLimiter::penalize would (the
-- strategy's adjust block, lua/adjust_<name>.lua, spliced in below, charged
-- at most what the rate repays in 2^50 us), then the strategy's block runs
-- again consuming nothing, so that the reply shows the state after (retry:
-- when the cost fits again), its first number 2 (denied, recorded). Each
-- block reads the interval as sent (SENT_INTERVAL: negative for a named
-- quota, which tat_value.lua turns positive as it reads it).
local RECORDED = 0
if ok == 0 and cost > 0 then
  interval = SENT_INTERVAL
  local units = math.floor(1125899906842624 / math.abs(interval))
  if units > cost then units = cost end
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
  apply = false
  interval = SENT_INTERVAL
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
  RECORDED = 2
end
if RECORDED == 2 then return fmt('2 %d %d %d %d %d', ok, rem, reset, retry, delay) end
-- (each formatted number costs Redis about a sixth of a command: the common
-- answer, allowed at once, formats two)
if ok == 1 and delay == 0 then return fmt('1 1 %d %d -1 0', rem, reset) end
return fmt('%d %d %d %d %d %d', ok, ok, rem, reset, retry, delay)
