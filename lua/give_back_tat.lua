-- Give-back of Gcra and TokenBucket. The take pushed the TAT to at least
-- `fin`, so its units are the last ones before fin; the part of the `units`
-- unspent that is still ahead of now is taken off: at most units * interval
-- and at most fin - now (what has drained since is no longer in the TAT:
-- giving it back would admit more than the rate). Never below now (never
-- more than the burst left); exact while fin - now >= units * interval.
-- The value as in tat.lua (a negative interval: a named quota's, which holds
-- its interval). A TAT written under another interval (the limits changed
-- since the take, whose fin is in that interval's time) is rescaled as
-- tat.lua does, and gives back the whole units of that part, at the new
-- interval.
local tagged, tf, tm = interval < 0, nil, nil
if tagged then
  interval = -interval
  tf, tm = '>I5<i7', 549755813888
  if interval >= tm then tf, tm = '>I6<i7', 140737488355328 end
end
local v = redis.call('GET', key)
local tat = tonumber(v)
local iv = interval
if v and not tat then
  if #v == 12 then
    iv, tat = struct.unpack('>I5<i7', v)
    iv = iv - 549755813888
  else
    iv, tat = struct.unpack('>I6<i7', v)
    iv = iv - 140737488355328
  end
end
if tat and tat > now and fin > now then
  local credit = units * iv
  if fin - now < credit then credit = fin - now end
  if iv ~= interval then
    local owed = ceil((tat - now) / iv) * interval
    if owed > 1125899906842624 then owed = 1125899906842624 end
    tat = now + owed
    credit = math.floor(credit / iv) * interval
  end
  local t = tat - credit
  if t <= now then
    redis.call('DEL', key)
  else
    local val
    if tagged then val = struct.pack(tf, interval + tm, t) else val = fmt('%d', t) end
    redis.call('SET', key, val, 'PX', fmt('%d', ceil((t - now) / 1000) + GRACE))
  end
end
