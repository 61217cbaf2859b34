-- FixedWindow. The window starts at the key's first hit and lasts `period`.
--
-- On Redis's clock the key is a plain counter whose TTL is the rest of the
-- window: INCRBY, then PTTL for reset_after (PEXPIRE on the first hit), with
-- no TIME call. With a manual clock the key is a hash {s = window start,
-- c = count} so that windows follow the manual time.
local function fixed_window_redis_clock(key, n, period, cost, apply)
  local ms = math.ceil(period / 1000)
  if apply and cost > 0 and cost <= n then
    local c = redis.call('INCRBY', key, num(cost))
    local reset
    if c == cost then
      redis.call('PEXPIRE', key, num(ms))
      reset = ms * 1000
    else
      local pttl = redis.call('PTTL', key)
      if pttl < 0 then
        redis.call('PEXPIRE', key, num(ms))
        pttl = ms
      end
      reset = pttl * 1000
    end
    if c > n then
      redis.call('DECRBY', key, num(cost))
      return 0, n - (c - cost), reset, reset, 0
    end
    return 1, n - c, reset, -1, 0
  end
  -- check only: read without writing
  local c = tonumber(redis.call('GET', key) or '0')
  local reset = 0
  if c > 0 then
    local pttl = redis.call('PTTL', key)
    if pttl == -1 then
      -- repair a key found without a TTL
      redis.call('PEXPIRE', key, num(ms))
      pttl = ms
    end
    if pttl > 0 then reset = pttl * 1000 end
  end
  if cost > n or c + cost > n then
    local retry = -1
    if cost <= n then retry = reset end
    return 0, n - c, reset, retry, 0
  end
  if cost > 0 and c == 0 then reset = ms * 1000 end
  return 1, n - c - cost, reset, -1, 0
end

S[1] = function(key, n, period, burst, interval, cost, nonce, apply)
  if not MANUAL then
    return fixed_window_redis_clock(key, n, period, cost, apply)
  end
  local now = clock()
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
