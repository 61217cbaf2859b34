-- TokenBucket: hash {t = tokens, s = time of the last refill}. The bucket
-- holds `burst` tokens and gains one every `interval`; a missing key is a full
-- bucket. reset_after: until the bucket is full again.
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
if cost > burst or cost > t then
  ok, rem, reset, retry, delay = 0, t, 0, -1, 0
  if cost <= burst then retry = s + (cost - t) * interval - now end
  if t < burst then reset = s + (burst - t) * interval - now end
  if reset > 0 and redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, fmt('%.0f', ceil(reset / 1000) + GRACE))
  end
else
  local left = t - cost
  ok, rem, reset, retry, delay = 1, left, 0, -1, 0
  if left < burst then reset = s + (burst - left) * interval - now end
  if apply and cost > 0 then
    redis.call('HSET', key, 't', fmt('%.0f', left), 's', fmt('%.0f', s))
    redis.call('PEXPIRE', key, fmt('%.0f', ceil(reset / 1000) + GRACE))
  end
end
