-- SlidingWindowCounter: hash {w = aligned window index, c = its count,
-- p = previous window's count}. The estimate is c + floor(p * overlap), where
-- overlap is the share of the previous window still inside the sliding window.
-- reset_after: until the end of the next window while this one has a count,
-- else until the end of this one while the previous had one.
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
local used = c + math.floor(p * ((period - e) / period))
if cost > n or used + cost > n then
  ok, rem, reset, retry, delay = 0, n - used, 0, -1, 0
  if rem < 0 then rem = 0 end
  if cost <= n then
    local a = n - cost - c
    if a >= 0 then
      retry = period + 1 - math.ceil((a + 1) * period / p) - e
    else
      local emin = period + 1 - math.ceil((n - cost + 1) * period / c)
      if emin < 0 then emin = 0 end
      retry = (w + 1) * period - now + emin
    end
  end
  if c > 0 then reset = (w + 2) * period - now elseif p > 0 then reset = (w + 1) * period - now end
  if reset > 0 and redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, fmt('%.0f', ceil(reset / 1000) + GRACE))
  end
else
  ok, rem, reset, retry, delay = 1, n - used - cost, 0, -1, 0
  if c + cost > 0 then reset = (w + 2) * period - now elseif p > 0 then reset = (w + 1) * period - now end
  if apply and cost > 0 then
    redis.call('HSET', key, 'w', fmt('%.0f', w), 'c', fmt('%.0f', c + cost), 'p', fmt('%.0f', p))
    redis.call('PEXPIRE', key, fmt('%.0f', ceil(reset / 1000) + GRACE))
  end
end
