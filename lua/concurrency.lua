-- Concurrency: sorted set of leases (score = expiry, member = lease id). At
-- most n unexpired leases per key; `period` is the lease timeout.
local expired = fmt('%d', now)
-- Count without writing: under maxmemory the first write must be the ZADD,
-- so that Redis refuses it (expired leases are removed after it).
local c = redis.call('ZCOUNT', key, '(' .. expired, '+inf')
local last = now
if c > 0 then last = zscore_at(key, -1) end
if cost > n or c + cost > n then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', expired)
  ok, rem, reset, retry, delay = 0, n - c, last - now, -1, 0
  if cost <= n then retry = zscore_at(key, c + cost - n - 1) - now end
  if reset > 0 and redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, fmt('%d', ceil(reset / 1000) + GRACE))
  end
else
  if cost > 0 then
    if last < now + period then last = now + period end
    if apply then
      zadd_members(key, now + period, nonce, cost)
      redis.call('ZREMRANGEBYSCORE', key, '-inf', expired)
      redis.call('PEXPIRE', key, fmt('%d', ceil((last - now) / 1000) + GRACE))
    end
  end
  ok, rem, reset, retry, delay = 1, n - c - cost, last - now, -1, 0
end
