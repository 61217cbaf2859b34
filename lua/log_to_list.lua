-- The end of the sliding log's decision and adjust
-- (lua/sliding_window_log.lua, lua/adjust_sliding_window_log.lua): a string
-- log that a write would take past 32 times becomes a list. `to_list` (nil:
-- no change) says what goes in it, oldest first: the times of `log` from
-- the `from`-th (0-based) of its `len`, then `count` times `t`; `ttl` is
-- its TTL in ms, as text.
if to_list then
  local l = to_list
  local items, j = {}, 0
  for i = l.from, l.len - 1 do
    j = j + 1
    items[j] = fmt('%d', struct.unpack('<I7', log, i * 7 + 1))
  end
  local s = fmt('%d', l.t)
  for _ = 1, l.count do
    j = j + 1
    items[j] = s
  end
  redis.call('DEL', key)
  for i = 1, j, 256 do
    local r = redis.pcall('LPUSH', key, unpack(items, i, math.min(i + 255, j)))
    if type(r) == 'table' then
      -- refused (maxmemory): the string is put back, the call fails
      if log then redis.pcall('SET', key, log, 'PX', l.ttl) else redis.pcall('DEL', key) end
      error(r)
    end
  end
  redis.call('PEXPIRE', key, l.ttl)
end
