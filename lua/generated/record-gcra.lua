-- GENERATED FILE, do not edit. The script this crate sends to Redis for a
-- limiter with one gcra quota whose denials record (on_denial(OnDenial::Record)):
-- the form of several quotas, its adjust block, lua/record.lua.
-- Assembled by LimiterScript::for_quotas (src/store/redis/script.rs) from the
-- files in lua/; everything below this header is sent byte for byte
-- (SCRIPT LOAD, then EVALSHA efa9db2b316bfb5e35b19b91aa7dfcd4aef10b32).
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
local A, C = {}, {}
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
-- a denial records (lua/record.lua)
local RECORD, RECORDED = 2, 0
local SHADOW = { false }
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
