-- Give-back of Gcra and TokenBucket. The take pushed the TAT to at least
-- `fin`, so its units are the last ones before fin; the part of the `units`
-- unspent that is still ahead of now is taken off: at most units * interval
-- and at most fin - now (what has drained since is no longer in the TAT:
-- giving it back would admit more than the rate). Never below now (never
-- more than the burst left); exact while fin - now >= units * interval.
local tat = tonumber(redis.call('GET', key))
if tat and tat > now and fin > now then
  local credit = units * interval
  if fin - now < credit then credit = fin - now end
  local t = tat - credit
  if t <= now then
    redis.call('DEL', key)
  else
    redis.call('SET', key, fmt('%d', t), 'PX', fmt('%d', ceil((t - now) / 1000) + GRACE))
  end
end
