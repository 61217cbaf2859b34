-- Sorted-set helpers of Concurrency.

-- Adds `cost` members `<nonce>.<i>` with `score`, 256 per ZADD.
local function zadd_members(key, score, nonce, cost)
  local s = fmt('%d', score)
  local i = 0
  while i < cost do
    local batch = {}
    local j = 0
    while j < 256 and i < cost do
      batch[#batch + 1] = s
      batch[#batch + 1] = nonce .. '.' .. i
      i = i + 1
      j = j + 1
    end
    redis.call('ZADD', key, unpack(batch))
  end
end

-- The score at rank `idx` (0 = lowest, -1 = highest).
local function zscore_at(key, idx)
  return tonumber(redis.call('ZRANGE', key, idx, idx, 'WITHSCORES')[2])
end
