-- Adjust of SlidingWindowLog: units > 0 logs that many times (at most
-- n + 1: more would leave the window at the same time) at now, or at the
-- newest logged time if later, past n if need be (a debt: denied, even a
-- cost of 0, until they leave the window), keeping the n + 1 newest times
-- (admission reads no older one, so repeated charges never grow a log past
-- n + 1); units < 0 drops that many newest times (an empty log is no
-- key; the TTL is kept). Either layout (lua/sliding_window_log.lua); a
-- string that would pass 32 times becomes a list.
local log = redis.pcall('GET', key)
local to_list
if type(log) == 'table' then
  if units > 0 then
    if units > n + 1 then units = n + 1 end
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
    redis.call('LTRIM', key, '0', fmt('%d', n))
    redis.call('PEXPIRE', key, fmt('%d', ceil((t + period - now) / 1000) + GRACE))
  else
    redis.call('LTRIM', key, fmt('%d', -units), '-1')
  end
elseif units > 0 then
  if units > n + 1 then units = n + 1 end
  local t, len = now, 0
  if log then
    len = #log / 7
    local head = struct.unpack('<I7', log, #log - 6)
    if head > t then t = head end
  end
  local ttl = fmt('%d', ceil((t + period - now) / 1000) + GRACE)
  -- (the oldest times past the n + 1 newest are dropped)
  local from = len + units - n - 1
  if from < 0 then from = 0 end
  if len + units <= 32 then
    local s = (log or '') .. string.rep(struct.pack('<I7', t), units)
    redis.call('SET', key, string.sub(s, from * 7 + 1), 'PX', ttl)
  else
    -- the log becomes a list (lua/log_to_list.lua, after this): its times,
    -- then the charge's
    to_list = { from = from, len = len, count = units, t = t, ttl = ttl }
  end
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
