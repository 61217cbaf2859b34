-- tower-redis-ratelimit: shared helpers. A limiter's script is this file, the
-- files of the strategies it uses (each registers S[<id>]), then single.lua
-- (one quota) or multi.lua (several, all-or-nothing). Redis compiles each
-- distinct script once; EVALSHA runs it.
--
-- ARGV[1] is the time in microseconds from a manual clock, or 0 for Redis's
-- own clock (TIME, read at most once per call, only by strategies that need it).
-- All times are integer microseconds held in Lua numbers (exact below 2^53).
--
-- Every strategy function has the signature
--   f(key, n, period, burst, interval, cost, nonce, apply)
-- and returns ok (1/0), remaining, reset_after, retry_after (-1 = never), delay.
-- With apply = false nothing is consumed, but the numbers are those the
-- request would get if it were; with apply = true an allowed request with
-- cost > 0 is written. reset_after is also the key's TTL: after it the state
-- is the same as no state.
local S = {}
local MANUAL = ARGV[1] ~= '0'
local NOW = nil
if MANUAL then NOW = tonumber(ARGV[1]) end

local function clock()
  if not NOW then
    local t = redis.call('TIME')
    NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return NOW
end

-- Exact decimal text of an integer-valued number (tostring may use exponents).
local function num(x)
  return string.format('%.0f', x)
end

-- TTL in milliseconds, rounded up, at least 1.
local function ttl_ms(us)
  local ms = math.ceil(us / 1000)
  if ms < 1 then ms = 1 end
  return num(ms)
end

-- A denied request writes nothing, but a key found without a TTL gets one.
local function repair(key, reset)
  if reset > 0 and redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, ttl_ms(reset))
  end
end
