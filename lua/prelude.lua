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
