-- Adjust of Gcra and TokenBucket: units > 0 pushes the TAT by
-- units * interval, past the burst if need be (a debt: denied until the TAT
-- is back within the burst, repaid at the quota's rate, up to 2^50 us past
-- now); units < 0 takes it
-- back, never below now (never more than the burst left). The value as in
-- tat.lua (a negative interval: a named quota's, which holds its interval);
-- a TAT written under another interval is first rescaled as tat.lua does.
local tagged, tf, tm = interval < 0, nil, nil
if tagged then
  interval = -interval
  tf, tm = '>I5<i7', 549755813888
  if interval >= tm then tf, tm = '>I6<i7', 140737488355328 end
end
local v = redis.call('GET', key)
local tat = tonumber(v)
if v and not tat then
  local iv
  if #v == 12 then
    iv, tat = struct.unpack('>I5<i7', v)
    iv = iv - 549755813888
  else
    iv, tat = struct.unpack('>I6<i7', v)
    iv = iv - 140737488355328
  end
  if iv ~= interval and tat > now then
    local owed = ceil((tat - now) / iv) * interval
    if owed > 1125899906842624 then owed = 1125899906842624 end
    tat = now + owed
  end
end
if not tat or tat < now then tat = now end
local t = tat + units * interval
-- a debt reaches at most 2^50 us past now (lua/give_back.lua)
if t > now + 1125899906842624 then t = now + 1125899906842624 end
if t <= now then
  redis.call('DEL', key)
else
  local val
  if tagged then val = struct.pack(tf, interval + tm, t) else val = fmt('%d', t) end
  redis.call('SET', key, val, 'PX', fmt('%d', ceil((t - now) / 1000) + GRACE))
end
