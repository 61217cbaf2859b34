-- Adjust of an aligned FixedWindow (Quota::aligned), as adjust_fixed_window.lua
-- does under a manual clock, on every clock: units > 0 charges the current
-- aligned window, past n if need be (a debt, not carried past the window's
-- end), starting it if there is none; units < 0 gives back, never below 0
-- (a count of 0 is no state). A count stays at most n plus what the rate
-- repays in 2^50 us (top).
local top = n + math.floor(1125899906842624 / math.abs(interval))
local s = math.floor(now / period) * period
local st = redis.call('HMGET', key, 's', 'c')
local ws, c = tonumber(st[1]), tonumber(st[2])
if not ws or not c or ws < s then c = 0 else s = ws end
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
