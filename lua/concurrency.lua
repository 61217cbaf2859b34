-- Concurrency: sorted set of leases (score = expiry, member = lease id). At
-- most n unexpired leases per key; `period` is the lease timeout.
S[7] = function(key, n, period, burst, interval, cost, nonce, apply)
  local now = clock()
  redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now))
  local c = redis.call('ZCARD', key)
  local last = now
  if c > 0 then
    last = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  end
  if cost > n or c + cost > n then
    local retry = -1
    if cost <= n then
      local idx = c + cost - n - 1
      local e = redis.call('ZRANGE', key, idx, idx, 'WITHSCORES')
      retry = tonumber(e[2]) - now
    end
    local reset = last - now
    repair(key, reset)
    return 0, n - c, reset, retry, 0
  end
  if cost > 0 then
    if last < now + period then last = now + period end
    if apply then
      local i = 0
      while i < cost do
        local batch = {}
        local j = 0
        while j < 256 and i < cost do
          batch[#batch + 1] = num(now + period)
          batch[#batch + 1] = nonce .. '.' .. i
          i = i + 1
          j = j + 1
        end
        redis.call('ZADD', key, unpack(batch))
      end
      redis.call('PEXPIRE', key, ttl_ms(last - now))
    end
  end
  return 1, n - c - cost, last - now, -1, 0
end
