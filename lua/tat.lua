-- Gcra, TokenBucket and LeakyBucket: the theoretical arrival time (TAT; for
-- the token bucket, the time the bucket is full again). A request of `cost`
-- pushes the TAT by cost * interval and is allowed if the new TAT is at most
-- burst * interval ahead of now. `queue` (set by gcra.lua, token_bucket.lua or
-- leaky_bucket.lua just before this block) is true for the LeakyBucket: same
-- admission, but the request is told to wait until its slot (delay).
--
-- It follows tat_value.lua, which reads the value (`tat`, rescaled if its
-- interval changed: `moved`).
if not tat or tat < now then tat = now end
local tau = burst * interval
local new_tat = tat + cost * interval
if cost > burst or new_tat - now > tau then
  ok, rem, reset, retry, delay = 0, math.floor((now + tau - tat) / interval), tat - now, -1, 0
  if cost <= burst then retry = new_tat - tau - now end
  if moved then
    redis.call('SET', key, struct.pack(tf, interval + tm, tat), 'PX', fmt('%d', ceil(reset / 1000) + GRACE))
  elseif reset > 0 and redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, fmt('%d', ceil(reset / 1000) + GRACE))
  end
else
  if apply and cost > 0 then
    local val
    if tagged then val = struct.pack(tf, interval + tm, new_tat) else val = fmt('%d', new_tat) end
    redis.call('SET', key, val, 'PX', fmt('%d', ceil((new_tat - now) / 1000) + GRACE))
  elseif moved then
    redis.call('SET', key, struct.pack(tf, interval + tm, tat), 'PX', fmt('%d', ceil((tat - now) / 1000) + GRACE))
  end
  ok, rem, reset, retry, delay = 1, math.floor((now + tau - new_tat) / interval), new_tat - now, -1, 0
  if queue and cost > 0 then delay = tat - now end
end
