-- FixedWindow: hash {s = window start, c = count}. The window starts at the
-- key's first hit and lasts `period`.
S[1] = function(key, n, period, burst, interval, now, cost, nonce, apply)
  local st = redis.call('HMGET', key, 's', 'c')
  local s, c = tonumber(st[1]), tonumber(st[2])
  if not s or not c or now >= s + period then
    s, c = now, 0
  end
  local left = s + period - now
  if cost > n or c + cost > n then
    local reset = 0
    if c > 0 then reset = left end
    local retry = -1
    if cost <= n then retry = left end
    repair(key, reset)
    return 0, n - c, reset, retry, 0
  end
  if apply and cost > 0 then
    if c == 0 then
      redis.call('HSET', key, 's', num(s), 'c', num(cost))
    else
      redis.call('HINCRBY', key, 'c', num(cost))
    end
    redis.call('PEXPIRE', key, ttl_ms(left))
  end
  local after = c + cost
  local reset = 0
  if after > 0 then reset = left end
  return 1, n - after, reset, -1, 0
end
