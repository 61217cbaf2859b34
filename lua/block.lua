-- Penalty box, in the scripts of limiters built with blocking only (others
-- never pay for it). The last key, `{<prefix>:<key>}:!`, holds the time its
-- block ends, with a TTL until then (plus the manual clock's grace). While it
-- is ahead of NOW every quota denies and retries when the block ends; nothing
-- is read or consumed. BLOCK_US (set before this file) is the penalty of a
-- denial (0: blocks are only set by RateLimiter::block); TAKE tells whether
-- the reply ends with NOW (a settle's or a local budget's take).
local BK = KEYS[#KEYS]
local BT = tonumber(redis.call('GET', BK))
if BT and BT > NOW then
  local r = fmt('0 0 %d %d 0', BT - NOW, BT - NOW)
  local out = { '0' }
  for i = 1, #KEYS - 1 do out[i + 1] = r end
  if TAKE then out[#KEYS + 1] = fmt('%d', NOW) end
  return table.concat(out, ' ')
end
