-- Adjust of SlidingWindowLog: units > 0 logs that many entries (at most n:
-- more would leave the window at the same time) at now, or at the newest
-- logged time if later, past n if need be (a debt: denied until they leave
-- the window); units < 0 drops that many newest entries (an empty list is no
-- key; the TTL is kept).
if units > 0 then
  if units > n then units = n end
  local t = now
  local head = tonumber(redis.call('LINDEX', key, 0))
  if head and head > t then t = head end
  local s = fmt('%d', t)
  local i = 0
  while i < units do
    local batch, j = {}, 0
    while j < 256 and i < units do
      j, i = j + 1, i + 1
      batch[j] = s
    end
    redis.call('LPUSH', key, unpack(batch))
  end
  redis.call('PEXPIRE', key, fmt('%d', ceil((t + period - now) / 1000) + GRACE))
else
  redis.call('LTRIM', key, fmt('%d', -units), '-1')
end
