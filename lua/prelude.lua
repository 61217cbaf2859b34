-- tower-redis-ratelimit: shared helpers. The limiter script is this file, then
-- one file per strategy (each registers S[<id>]), then limiter.lua.
--
-- All times are integer microseconds held in Lua numbers (exact below 2^53).
-- Every strategy function has the signature
--   f(key, n, period, burst, interval, now, cost, nonce, apply)
-- and returns ok (1/0), remaining, reset_after, retry_after (-1 = never), delay.
-- With apply = false nothing is consumed, but the numbers are those the
-- request would get if it were; with apply = true an allowed request with
-- cost > 0 is written. reset_after is also the key's TTL: after it the state
-- is the same as no state.
local S = {}

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
