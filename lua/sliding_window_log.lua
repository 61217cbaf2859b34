-- SlidingWindowLog: sorted set of (score = request time, member = unique id).
-- Exact: at most n requests with a time in (now - period, now].
local expired = fmt('%.0f', now - period)
-- Count without writing: under maxmemory the first write must be the ZADD,
-- so that Redis refuses it (expired entries are removed after it).
local c = redis.call('ZCOUNT', key, '(' .. expired, '+inf')
local newest = now - period
if c > 0 then newest = zscore_at(key, -1) end
reset = 0
if c > 0 then reset = newest + period - now end
if cost > n or c + cost > n then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', expired)
  ok, rem, retry, delay = 0, n - c, -1, 0
  if cost <= n then
    -- the (c + cost - n)-th oldest entry must leave the window first
    retry = zscore_at(key, c + cost - n - 1) + period - now
  end
  if reset > 0 and redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, fmt('%.0f', ceil(reset / 1000) + GRACE))
  end
else
  if cost > 0 then
    if newest < now then newest = now end
    reset = newest + period - now
    if apply then
      zadd_members(key, now, nonce, cost)
      redis.call('ZREMRANGEBYSCORE', key, '-inf', expired)
      redis.call('PEXPIRE', key, fmt('%.0f', ceil(reset / 1000) + GRACE))
    end
  end
  ok, rem, retry, delay = 1, n - c - cost, -1, 0
end
