-- Adjust of SlidingWindowLog: units > 0 logs that many times (at most n:
-- more would leave the window at the same time) at now, or at the newest
-- logged time if later, past n if need be (a debt: denied until they leave
-- the window); units < 0 drops that many newest times (an empty log is no
-- key; the TTL is kept).
local log = redis.call('GET', key)
if units > 0 then
  if units > n then units = n end
  local t = now
  if log then
    local head = struct.unpack('<I7', log, #log - 6)
    if head > t then t = head end
  else
    log = ''
  end
  log = log .. string.rep(struct.pack('<I7', t), units)
  redis.call('SET', key, log, 'PX', fmt('%d', ceil((t + period - now) / 1000) + GRACE))
elseif log and units < 0 then
  local keep = #log - 7 * -units
  local pttl = redis.call('PTTL', key)
  if keep <= 0 or pttl == 0 then
    redis.call('DEL', key)
  elseif pttl > 0 then
    redis.call('SET', key, string.sub(log, 1, keep), 'PX', fmt('%d', pttl))
  else
    redis.call('SET', key, string.sub(log, 1, keep))
  end
end
