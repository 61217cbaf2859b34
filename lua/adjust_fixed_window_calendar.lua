-- Adjust of a calendar FixedWindow (Quota::calendar), as
-- adjust_fixed_window_aligned.lua does in the window fixed_window_calendar.lua
-- picks (period and burst: the bounds the client sent, as there): units > 0
-- charges it, past n if need be (a debt, not carried past the window's end),
-- starting it if there is none; units < 0 gives back, never below 0 (a count
-- of 0 is no state). A count stays at most n plus what the rate repays in
-- 2^50 us (top).
local top = n + math.floor(1125899906842624 / math.abs(interval))
local l1 = math.floor(burst / 33554432)
local e = period
if now < period - l1 * 1000000 then
  e = period - l1 * 1000000
elseif now >= period then
  e = period + (burst - l1 * 33554432) * 1000000
end
local st = redis.call('HMGET', key, 'e', 'c')
local we, c = tonumber(st[1]), tonumber(st[2])
if not we or not c or we < e then c = 0 else e = we end
local left = e - now
if left < 1 then left = 1 end
if units > 0 then
  if c + units > top then units = math.max(top - c, 0) end
  redis.call('HSET', key, 'e', fmt('%d', e), 'c', fmt('%d', c + units))
  redis.call('PEXPIRE', key, fmt('%d', ceil(left / 1000) + GRACE))
elseif c > 0 then
  if c + units <= 0 then
    redis.call('DEL', key)
  else
    redis.call('HINCRBY', key, 'c', fmt('%d', units))
  end
end
