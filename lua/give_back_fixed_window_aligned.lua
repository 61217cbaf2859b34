-- Give-back of an aligned FixedWindow (Quota::aligned): only into the take's
-- own window (the hash holds its start: fin = start + period), never below 0
-- (a count given back to 0 is no state: the key goes). The same as
-- give_back_fixed_window.lua under a manual clock, on every clock.
local st = redis.call('HMGET', key, 's', 'c')
local s, c = tonumber(st[1]), tonumber(st[2])
if s and c and c > 0 and s + period == fin and now < fin then
  if units >= c then
    redis.call('DEL', key)
  else
    redis.call('HINCRBY', key, 'c', fmt('%d', -units))
  end
end
