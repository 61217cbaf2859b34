-- SlidingWindowLog: a list of request times, newest first, one entry per unit
-- of cost. Exact: at most n requests with a time in (now - period, now]. An
-- admitted request is logged at now, or at the newest logged time if that is
-- later (a clock that went back), so the list stays sorted; entries that left
-- the window are dropped when the next request is logged, so it holds at most
-- n entries.
local old = now - period
local len = redis.call('LLEN', key)
local c, head = 0, old
if len > 0 then
  head = tonumber(redis.call('LINDEX', key, 0))
  c = len
  if tonumber(redis.call('LINDEX', key, -1)) <= old then
    -- the window holds entries [0, c): gallop from the tail, then bisect
    local lo, hi, step = 0, len - 1, 1
    while hi - step >= lo do
      local i = hi - step
      if tonumber(redis.call('LINDEX', key, i)) <= old then
        hi, step = i, step * 2
      else
        lo = i + 1
        break
      end
    end
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if tonumber(redis.call('LINDEX', key, mid)) <= old then hi = mid else lo = mid + 1 end
    end
    c = lo
  end
end
reset = 0
if c > 0 then reset = head + period - now end
if cost > n or c + cost > n then
  ok, rem, retry, delay = 0, n - c, -1, 0
  if cost <= n then
    -- the (c + cost - n)-th oldest entry in the window must leave it first
    retry = tonumber(redis.call('LINDEX', key, n - cost)) + period - now
  end
  if reset > 0 and redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, fmt('%d', ceil(reset / 1000) + GRACE))
  end
else
  if cost > 0 then
    local t = now
    if head > t then t = head end
    reset = t + period - now
    if apply then
      -- the push first: under maxmemory Redis refuses it before anything is dropped
      local s = fmt('%d', t)
      if cost == 1 then
        redis.call('LPUSH', key, s)
      else
        local i = 0
        while i < cost do
          local batch, j = {}, 0
          while j < 256 and i < cost do
            j, i = j + 1, i + 1
            batch[j] = s
          end
          redis.call('LPUSH', key, unpack(batch))
        end
      end
      if c < len then redis.call('LTRIM', key, 0, c + cost - 1) end
      redis.call('PEXPIRE', key, fmt('%d', ceil(reset / 1000) + GRACE))
    end
  end
  ok, rem, retry, delay = 1, n - c - cost, -1, 0
end
