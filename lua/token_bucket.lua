-- TokenBucket: hash {t = tokens, s = time of the last refill}. The bucket
-- holds `burst` tokens and gains one every `interval`; a missing key is a full bucket.
S[4] = function(key, n, period, burst, interval, cost, nonce, apply)
  local now = NOW
  local st = redis.call('HMGET', key, 't', 's')
  local t, s = tonumber(st[1]), tonumber(st[2])
  if not t or not s then
    t, s = burst, now
  end
  if now > s then
    local add = math.floor((now - s) / interval)
    if t + add >= burst then
      t, s = burst, now
    else
      t, s = t + add, s + add * interval
    end
  end
  local function reset_of(tokens)
    if tokens >= burst then return 0 end
    return s + (burst - tokens) * interval - now
  end
  if cost > burst or cost > t then
    local retry = -1
    if cost <= burst then retry = s + (cost - t) * interval - now end
    local reset = reset_of(t)
    if reset > 0 and redis.call('PTTL', key) == -1 then
      redis.call('PEXPIRE', key, fmt('%.0f', ceil(reset / 1000)))
    end
    return 0, t, reset, retry, 0
  end
  local reset = reset_of(t - cost)
  if apply and cost > 0 then
    redis.call('HSET', key, 't', fmt('%.0f', t - cost), 's', fmt('%.0f', s))
    redis.call('PEXPIRE', key, fmt('%.0f', ceil((reset) / 1000)))
  end
  return 1, t - cost, reset, -1, 0
end
