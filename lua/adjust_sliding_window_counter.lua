-- Adjust of SlidingWindowCounter: units > 0 adds to the current aligned
-- window's count, past n if need be (a debt: the estimate denies until it
-- weighs little enough, in the next window; no debt is carried further);
-- units < 0 takes off at most the current count. Read as the strategy's block
-- reads it; written with the TTL the new state needs.
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
  w = sw
elseif sw ~= w then
  c, p = 0, 0
end
local c2 = c + units
if c2 < 0 then c2 = 0 end
-- (at most n plus what the rate repays in 2^50 us: lua/give_back.lua)
local top = n + math.floor(1125899906842624 / math.abs(interval))
if c2 > top then c2 = math.max(c, top) end
local reset = 0
if c2 > 0 then reset = (w + 2) * period - now elseif p > 0 then reset = (w + 1) * period - now end
if reset <= 0 then
  redis.call('DEL', key)
else
  local ttl = fmt('%d', ceil(reset / 1000) + GRACE)
  if packed and p < 2097152 and c2 < 2097152 then
    redis.call('SET', key, fmt('%d', (c2 * 2097152 + p) * 1024 + w % 1024), 'PX', ttl)
  else
    redis.call('SET', key, fmt('%d %d %d', w, c2, p), 'PX', ttl)
  end
end
