-- SlidingWindowLog: sorted set of (score = request time, member = unique id).
-- Exact: at most n requests with a time in (now - period, now].
S[2] = function(key, n, period, burst, interval, cost, nonce, apply)
  local now = NOW
  local expired = fmt('%.0f', now - period)
  -- Count without writing: under maxmemory the first write must be the ZADD,
  -- so that Redis refuses it (expired entries are removed after it).
  local c = redis.call('ZCOUNT', key, '(' .. expired, '+inf')
  local newest = now - period
  if c > 0 then
    newest = zscore_at(key, -1)
  end
  local reset = 0
  if c > 0 then reset = newest + period - now end
  if cost > n or c + cost > n then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', expired)
    local retry = -1
    if cost <= n then
      -- the (c + cost - n)-th oldest entry must leave the window first
      local idx = c + cost - n - 1
      retry = zscore_at(key, idx) + period - now
    end
    if reset > 0 and redis.call('PTTL', key) == -1 then
      redis.call('PEXPIRE', key, fmt('%.0f', ceil(reset / 1000)))
    end
    return 0, n - c, reset, retry, 0
  end
  if cost > 0 then
    if newest < now then newest = now end
    reset = newest + period - now
    if apply then
      zadd_members(key, now, nonce, cost)
      redis.call('ZREMRANGEBYSCORE', key, '-inf', expired)
      redis.call('PEXPIRE', key, fmt('%.0f', ceil((reset) / 1000)))
    end
  end
  return 1, n - c - cost, reset, -1, 0
end
