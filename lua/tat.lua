-- Gcra: one string, the theoretical arrival time (TAT). A request of `cost`
-- pushes the TAT by cost * interval and is allowed if the new TAT is at most
-- burst * interval ahead of now. `queue` = true is the LeakyBucket variant:
-- same admission, but the request is told to wait until its slot (delay).
local function tat_policy(key, burst, interval, cost, apply, queue)
  local now = clock()
  local tat = tonumber(redis.call('GET', key))
  if not tat or tat < now then tat = now end
  local tau = burst * interval
  local new_tat = tat + cost * interval
  if cost > burst or new_tat - now > tau then
    local retry = -1
    if cost <= burst then retry = new_tat - tau - now end
    local reset = tat - now
    repair(key, reset)
    return 0, math.floor((now + tau - tat) / interval), reset, retry, 0
  end
  if apply and cost > 0 then
    redis.call('SET', key, num(new_tat), 'PX', ttl_ms(new_tat - now))
  end
  local delay = 0
  if queue and cost > 0 then delay = tat - now end
  return 1, math.floor((now + tau - new_tat) / interval), new_tat - now, -1, delay
end

