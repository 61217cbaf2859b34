-- Give-back of a calendar FixedWindow (Quota::calendar): only into the take's
-- own window, never below 0 (a count given back to 0 is no state: the key
-- goes). The hash holds the window's end (e), which is the take's fin (its
-- reset_after runs to that end), so no bounds are needed: a key of a later
-- window (a month rolled over since the take) is left as it is.
local st = redis.call('HMGET', key, 'e', 'c')
local e, c = tonumber(st[1]), tonumber(st[2])
if e and c and c > 0 and e == fin and now < fin then
  if units >= c then
    redis.call('DEL', key)
  else
    redis.call('HINCRBY', key, 'c', fmt('%d', -units))
  end
end
