-- FixedWindow. The window starts at the key's first hit and lasts `period`.
--
-- On Redis's clock the key is a plain counter whose TTL is the rest of the
-- window: GET and PTTL, then INCRBY (PEXPIRE on the first hit), with no TIME
-- call; the one-quota case usually takes fixed_window_fast.lua instead. With a
-- manual clock the key is a hash {s = window start, c = count} so that windows
-- follow the manual time.
if not MANUAL then
  local ms = ceil(period / 1000)
  local c = tonumber(redis.call('GET', key) or '0')
  local ttl = 0
  if c > 0 then
    ttl = redis.call('PTTL', key)
    if ttl == -1 then
      -- repair a key found without a TTL
      ttl = ms
      redis.call('PEXPIRE', key, fmt('%d', ms))
    end
    if ttl < 0 then ttl = 0 end
  end
  if cost > n or c + cost > n then
    ok, rem, reset, retry, delay = 0, n - c, ttl * 1000, -1, 0
    if cost <= n then retry = ttl * 1000 end
  else
    if cost > 0 and c == 0 then ttl = ms end
    if apply and cost > 0 then
      redis.call('INCRBY', key, fmt('%d', cost))
      if c == 0 then redis.call('PEXPIRE', key, fmt('%d', ms)) end
    end
    ok, rem, reset, retry, delay = 1, n - c - cost, ttl * 1000, -1, 0
  end
else
  local st = redis.call('HMGET', key, 's', 'c')
  local s, c = tonumber(st[1]), tonumber(st[2])
  if not s or not c or now >= s + period then
    s, c = now, 0
  end
  local left = s + period - now
  if cost > n or c + cost > n then
    ok, rem, reset, retry, delay = 0, n - c, 0, -1, 0
    if c > 0 then reset = left end
    if cost <= n then retry = left end
    if reset > 0 and redis.call('PTTL', key) == -1 then
      redis.call('PEXPIRE', key, fmt('%d', ceil(reset / 1000) + GRACE))
    end
  else
    if apply and cost > 0 then
      if c == 0 then
        redis.call('HSET', key, 's', fmt('%d', s), 'c', fmt('%d', cost))
      else
        redis.call('HINCRBY', key, 'c', fmt('%d', cost))
      end
      redis.call('PEXPIRE', key, fmt('%d', ceil(left / 1000) + GRACE))
    end
    ok, rem, reset, retry, delay = 1, n - c - cost, 0, -1, 0
    if c + cost > 0 then reset = left end
  end
end
