-- Concurrency: sorted set of leases (score = expiry, member = lease id). At
-- most n unexpired leases per key; `period` is the lease timeout.
S[7] = function(key, n, period, burst, interval, cost, nonce, apply)
  local now = NOW
  local expired = fmt('%.0f', now)
  -- Count without writing: under maxmemory the first write must be the ZADD,
  -- so that Redis refuses it (expired leases are removed after it).
  local c = redis.call('ZCOUNT', key, '(' .. expired, '+inf')
  local last = now
  if c > 0 then
    last = zscore_at(key, -1)
  end
  if cost > n or c + cost > n then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', expired)
    local retry = -1
    if cost <= n then
      local idx = c + cost - n - 1
      retry = zscore_at(key, idx) - now
    end
    local reset = last - now
    if reset > 0 and redis.call('PTTL', key) == -1 then
      redis.call('PEXPIRE', key, fmt('%.0f', ceil(reset / 1000)))
    end
    return 0, n - c, reset, retry, 0
  end
  if cost > 0 then
    if last < now + period then last = now + period end
    if apply then
      zadd_members(key, now + period, nonce, cost)
      redis.call('ZREMRANGEBYSCORE', key, '-inf', expired)
      redis.call('PEXPIRE', key, fmt('%.0f', ceil((last - now) / 1000)))
    end
  end
  return 1, n - c - cost, last - now, -1, 0
end
