-- SlidingWindowCounter: hash {w = aligned window index, c = its count,
-- p = previous window's count}. The estimate is c + floor(p * overlap), where
-- overlap is the share of the previous window still inside the sliding window.
S[3] = function(key, n, period, burst, interval, cost, nonce, apply)
  local now = NOW
  local w = math.floor(now / period)
  local st = redis.call('HMGET', key, 'w', 'c', 'p')
  local sw, c, p = tonumber(st[1]), tonumber(st[2]) or 0, tonumber(st[3]) or 0
  if not sw then
    c, p = 0, 0
  elseif sw == w - 1 then
    c, p = 0, c
  elseif sw > w then
    w = sw -- the clock went backwards: stay in the stored window
  elseif sw ~= w then
    c, p = 0, 0
  end
  local e = now - w * period
  if e < 0 then e = 0 end
  local est = math.floor(p * ((period - e) / period))
  local used = c + est
  local function reset_of(cur)
    if cur > 0 then return (w + 2) * period - now end
    if p > 0 then return (w + 1) * period - now end
    return 0
  end
  if cost > n or used + cost > n then
    local retry = -1
    if cost <= n then
      local a = n - cost - c
      if a >= 0 then
        local emin = period + 1 - math.ceil((a + 1) * period / p)
        retry = emin - e
      else
        local emin = period + 1 - math.ceil((n - cost + 1) * period / c)
        if emin < 0 then emin = 0 end
        retry = (w + 1) * period - now + emin
      end
    end
    local reset = reset_of(c)
    if reset > 0 and redis.call('PTTL', key) == -1 then
      redis.call('PEXPIRE', key, fmt('%.0f', ceil(reset / 1000)))
    end
    local rem = n - used
    if rem < 0 then rem = 0 end
    return 0, rem, reset, retry, 0
  end
  local reset = reset_of(c + cost)
  if apply and cost > 0 then
    redis.call('HSET', key, 'w', fmt('%.0f', w), 'c', fmt('%.0f', c + cost), 'p', fmt('%.0f', p))
    redis.call('PEXPIRE', key, fmt('%.0f', ceil((reset) / 1000)))
  end
  return 1, n - used - cost, reset, -1, 0
end
