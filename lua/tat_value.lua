-- The value of a TAT key (Gcra, TokenBucket, LeakyBucket), read at the start
-- of the decision (tat.lua), the give-back (give_back_tat.lua) and the adjust
-- (adjust_tat.lua) blocks. An unnamed quota's key names its count and period,
-- hence its interval: one integer, the TAT. A named quota (or a plan's) keeps
-- its key when its rate changes (the arguments say so with a negative
-- interval), so its value also holds the interval it was written under: 12
-- bytes, the interval plus 2^39 (5 bytes, big-endian: the first byte has its
-- top bit set, so the value never reads as a number), then the TAT (7 bytes,
-- little-endian, signed); from an interval of 2^39 us (6.4 days) on, 13 bytes
-- (6 for the interval, plus 2^47). `tf`, `tm`: how to write it back.
-- A TAT written under another interval `iv` (the limits changed) is
-- rescaled: the units it still owes, rounded up, are kept at the new
-- interval (at most 2^50 us); `moved` says so, for the block to write it
-- down. Rounded up, a raised limit admits every request the old one would
-- have, a lowered one none the new one would not (see README, "Changing
-- limits while running").
local tagged, tf, tm = interval < 0, nil, nil
if tagged then
  interval = -interval
  tf, tm = '>I5<i7', 549755813888
  if interval >= tm then tf, tm = '>I6<i7', 140737488355328 end
end
local v = redis.call('GET', key)
local tat, iv, moved = tonumber(v), interval, false
if v and not tat then
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
    tat, moved = now + owed, tagged
  end
end
