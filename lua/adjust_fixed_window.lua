-- Adjust of FixedWindow (penalize, reward, a settle's excess): units > 0
-- charges the current window, past n if need be (a debt: the window denies
-- until it ends; a debt is not carried past the window's end), starting a
-- window if there is none; units < 0 gives back, never below 0 (a count of 0
-- is no state). The key's TTL is kept, or set for a window it starts. A
-- count stays at most n plus what the rate repays in 2^50 us (top).
local top = n + math.floor(1125899906842624 / math.abs(interval))
if not MANUAL then
  local c = tonumber(redis.call('GET', key) or '0')
  if units > 0 then
    if c + units > top then units = top - c end
    if units > 0 then
      redis.call('INCRBY', key, fmt('%d', units))
      if c == 0 then redis.call('PEXPIRE', key, fmt('%d', ceil(period / 1000))) end
    end
  elseif c > 0 then
    if c + units <= 0 then
      redis.call('DEL', key)
    else
      redis.call('DECRBY', key, fmt('%d', -units))
    end
  end
else
  local st = redis.call('HMGET', key, 's', 'c')
  local s, c = tonumber(st[1]), tonumber(st[2])
  if not s or not c or now >= s + period then s, c = now, 0 end
  if units > 0 then
    if c + units > top then units = math.max(top - c, 0) end
    redis.call('HSET', key, 's', fmt('%d', s), 'c', fmt('%d', c + units))
    redis.call('PEXPIRE', key, fmt('%d', ceil((s + period - now) / 1000) + GRACE))
  elseif c > 0 then
    if c + units <= 0 then
      redis.call('DEL', key)
    else
      redis.call('HINCRBY', key, 'c', fmt('%d', units))
    end
  end
end
