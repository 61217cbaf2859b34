-- SlidingWindowLog: the request times (µs), one per unit of cost. Exact: at
-- most n requests with a time in (now - period, now]. An admitted request is
-- logged at now, or at the newest logged time if that is later (a clock that
-- went back), so the times stay sorted; those that left the window are
-- dropped when the next request is logged, so a log holds at most n times.
-- Two layouts, by the log's length:
-- * up to 32 times: one string of 7-byte little-endian integers, oldest
--   first, read with one GET and written with one SET … PX (a list takes a
--   command per end it reads and one more for its TTL);
-- * longer: a list of decimal times, newest first (LLEN, LINDEX at both
--   ends, LPUSH, LTRIM, PEXPIRE: the same commands at any length, where
--   reading and rewriting a string costs Redis about 36 ns per time).
-- A log becomes a list when a request would take it past 32 times, and stays
-- one until it expires. GET of a list answers WRONGTYPE: that is the test.
local old = now - period
local log = redis.pcall('GET', key)
local list = type(log) == 'table'
local sunpack = struct.unpack
-- len: the times logged; c: those in the window (the newest c); head: the
-- newest; tail: the oldest (read for a list); to_list: a string log's
-- conversion (lua/log_to_list.lua)
local len, c, head, tail, to_list = 0, 0, old, nil, nil
if list then
  len = redis.call('LLEN', key)
  if len > 0 then
    head = tonumber(redis.call('LINDEX', key, 0))
    tail = tonumber(redis.call('LINDEX', key, -1))
    c = len
    if tail <= old then
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
elseif log then
  len = #log / 7
  head = sunpack('<I7', log, #log - 6)
  c = len
  if sunpack('<I7', log) <= old then
    -- bisect for the oldest time in the window (none: c = 0)
    local lo, hi = 1, len
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if sunpack('<I7', log, mid * 7 + 1) <= old then lo = mid + 1 else hi = mid end
    end
    c = len - lo
  end
end
reset = 0
if c > 0 then reset = head + period - now end
if cost > n or c + cost > n then
  ok, rem, retry, delay = 0, n - c, -1, 0
  if cost <= n then
    -- the (c + cost - n)-th oldest time in the window must leave it first:
    -- the (n - cost + 1)-th newest
    if list then
      -- (a full log's oldest or newest time is read already)
      local leaving = tail
      if n - cost == 0 then
        leaving = head
      elseif n - cost ~= len - 1 then
        leaving = tonumber(redis.call('LINDEX', key, n - cost))
      end
      retry = leaving + period - now
    else
      retry = sunpack('<I7', log, (len - 1 - n + cost) * 7 + 1) + period - now
    end
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
      local ttl = PERIOD_MS
      if reset ~= period or GRACE ~= 0 or not ttl then
        ttl = fmt('%d', ceil(reset / 1000) + GRACE)
      end
      if list then
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
        redis.call('PEXPIRE', key, ttl)
      elseif c + cost <= 32 then
        local s = struct.pack('<I7', t)
        if cost > 1 then s = string.rep(s, cost) end
        -- the times that left the window are dropped
        if c == 0 then
          log = s
        elseif c < len then
          log = string.sub(log, (len - c) * 7 + 1) .. s
        else
          log = log .. s
        end
        -- one SET: under maxmemory Redis refuses it whole
        redis.call('SET', key, log, 'PX', ttl)
      else
        -- the log becomes a list (lua/log_to_list.lua, after this): the
        -- times still in the window, then this request's
        to_list = { from = len - c, len = len, count = cost, t = t, ttl = ttl }
      end
    end
  end
  ok, rem, retry, delay = 1, n - c - cost, -1, 0
end
