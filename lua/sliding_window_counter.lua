-- SlidingWindowCounter: the aligned window w = floor(now / period), its count
-- c and the previous window's count p. The estimate is c + floor(p * overlap),
-- where overlap is the share of the previous window still inside the sliding
-- window. reset_after: until the end of the next window while this one has a
-- count, else until the end of this one while the previous had one.
--
-- The key is one string. On Redis's clock (with n < 2^21 and a period of at
-- least 1 ms) it is one integer, (c * 2^21 + p) * 1024 + w % 1024: the key
-- expires at the end of the window after its own (TTLs are exact on Redis's
-- clock, up to a millisecond of rounding), so while it exists its window is
-- at most a few windows back, which w's low ten bits tell apart (a few windows
-- ahead: Redis's clock went back). Otherwise (a manual clock, whose time need
-- not follow the TTL) it is the text 'w c p'. Either is read on any clock
-- (an integer needs Redis's clock to be read), so a rate change of a named
-- quota reads the counts (they mean the same under any count).
local w = math.floor(now / period)
local packed = not MANUAL and n < 2097152 and period >= 1000
local v = redis.call('GET', key)
local x = tonumber(v)
local sw, c, p
if x then
  if packed then
    local d = (w - x % 1024) % 1024
    if d <= 8 then sw = w - d elseif d >= 1016 then sw = w + 1024 - d end
    x = math.floor(x / 1024)
    c = math.floor(x / 2097152)
    p = x - c * 2097152
  end
elseif v then
  local a, b, e = string.match(v, '^(%d+) (%d+) (%d+)$')
  sw, c, p = tonumber(a), tonumber(b), tonumber(e)
end
if not sw or not c or not p then
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
    redis.call('PEXPIRE', key, fmt('%d', ceil(reset / 1000) + GRACE))
  end
else
  ok, rem, reset, retry, delay = 1, n - used - cost, 0, -1, 0
  if c + cost > 0 then reset = (w + 2) * period - now elseif p > 0 then reset = (w + 1) * period - now end
  if apply and cost > 0 then
    if x and packed and sw == w then
      -- the stored window: its count grows in place, and its TTL, set when
      -- the window's first request was written (every write sets or keeps
      -- one), already ends with the next window
      local by = '2147483648'
      if cost ~= 1 then by = fmt('%d', cost * 2147483648) end
      redis.call('INCRBY', key, by)
    elseif packed and p < 2097152 then
      redis.call('SET', key, fmt('%d', ((c + cost) * 2097152 + p) * 1024 + w % 1024), 'PX',
        fmt('%d', ceil(reset / 1000)))
    else
      redis.call('SET', key, fmt('%d %d %d', w, c + cost, p), 'PX', fmt('%d', ceil(reset / 1000) + GRACE))
    end
  end
end
