-- Adjust of Gcra and TokenBucket, and the charge of LeakyBucket (run for
-- units > 0 only: pushing the end of its queue moves no slot already
-- promised, giving back would let a later request jump ahead of them).
-- units > 0 pushes the TAT by units * interval, past the burst if need be (a
-- debt: denied until the TAT is back within the burst, repaid at the quota's
-- rate, up to 2^50 us past now); units < 0 takes it back, never below now
-- (never more than the burst left). It follows tat_value.lua, which reads
-- the value (rescaled if its interval changed).
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
