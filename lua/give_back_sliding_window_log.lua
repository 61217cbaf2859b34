-- Give-back of SlidingWindowLog: the take logged its units at one time,
-- fin - period (its reset_after is that time plus the period, from its NOW);
-- up to `units` times of exactly that are removed, newest first, while it is
-- still in the window (equal times are interchangeable). Exact. An empty log
-- is no key; the TTL is kept. Either layout (lua/sliding_window_log.lua).
local t = fin - period
if t > now - period then
  local log = redis.pcall('GET', key)
  if type(log) == 'table' then
    redis.call('LREM', key, fmt('%d', units), fmt('%d', t))
  elseif log then
    local sunpack = struct.unpack
    local len = #log / 7
    -- hi: the first time after t (len: none)
    local lo, hi = 0, len
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if sunpack('<I7', log, mid * 7 + 1) <= t then lo = mid + 1 else hi = mid end
    end
    local from = hi
    while from > 0 and hi - from < units and sunpack('<I7', log, (from - 1) * 7 + 1) == t do
      from = from - 1
    end
    if from < hi then
      log = string.sub(log, 1, from * 7) .. string.sub(log, hi * 7 + 1)
      local pttl = redis.call('PTTL', key)
      if #log == 0 or pttl == 0 then
        redis.call('DEL', key)
      elseif pttl > 0 then
        redis.call('SET', key, log, 'PX', fmt('%d', pttl))
      else
        redis.call('SET', key, log)
      end
    end
  end
end
