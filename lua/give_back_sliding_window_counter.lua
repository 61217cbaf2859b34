-- Give-back of SlidingWindowCounter: only while now is still in the take's
-- aligned window (floor(at / period)) and the key holds that window; its
-- count goes down by at most what it holds, the previous window's count and
-- the TTL are kept. (Once the window has passed, its count weighs on the
-- next window as the previous one: nothing is given back then.)
local w = math.floor(now / period)
if w == math.floor(at / period) then
  local packed = not MANUAL and n < 2097152 and period >= 1000
  local v = redis.call('GET', key)
  local x = tonumber(v)
  local sw, c, p
  if x then
    if packed and (w - x % 1024) % 1024 == 0 then
      sw = w
      x = math.floor(x / 1024)
      c = math.floor(x / 2097152)
      p = x - c * 2097152
    end
  elseif v then
    local a, b, e = string.match(v, '^(%d+) (%d+) (%d+)$')
    sw, c, p = tonumber(a), tonumber(b), tonumber(e)
  end
  if sw == w and c and p and c > 0 then
    local g = units
    if g > c then g = c end
    if packed and p < 2097152 then
      redis.call('SET', key, fmt('%d', ((c - g) * 2097152 + p) * 1024 + w % 1024), 'KEEPTTL')
    else
      redis.call('SET', key, fmt('%d %d %d', w, c - g, p), 'KEEPTTL')
    end
  end
end
