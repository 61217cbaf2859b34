-- Give-back of Gcra and TokenBucket. The take pushed the TAT to at least
-- `fin`, so its units are the last ones before fin; the part of the `units`
-- unspent that is still ahead of now is taken off: at most units * interval
-- and at most fin - now (what has drained since is no longer in the TAT:
-- giving it back would admit more than the rate). Never below now (never
-- more than the burst left); exact while fin - now >= units * interval.
-- It follows tat_value.lua, which reads the value; a TAT written under
-- another interval (the limits changed since the take, whose fin is in that
-- interval's time) is rescaled there, and gives back the whole units of that
-- part, at the new interval.
if tat and tat > now and fin > now then
  local credit = units * iv
  if fin - now < credit then credit = fin - now end
  if iv ~= interval then credit = math.floor(credit / iv) * interval end
  local t = tat - credit
  if t <= now then
    redis.call('DEL', key)
  else
    local val
    if tagged then val = struct.pack(tf, interval + tm, t) else val = fmt('%d', t) end
    redis.call('SET', key, val, 'PX', fmt('%d', ceil((t - now) / 1000) + GRACE))
  end
end
