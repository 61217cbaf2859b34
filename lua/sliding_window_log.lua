-- SlidingWindowLog: one string of request times, oldest first, each a 7-byte
-- little-endian integer (µs), one per unit of cost. Exact: at most n requests
-- with a time in (now - period, now]. An admitted request is logged at now,
-- or at the newest logged time if that is later (a clock that went back), so
-- the times stay sorted; those that left the window are dropped when the next
-- request is logged, so the string holds at most n times.
-- One GET reads the whole log and one SET writes it with its TTL (a list
-- takes a command for each end it reads and one more for the TTL), and a
-- time takes 7 bytes (a list's about 10).
local unpack = struct.unpack
local old = now - period
local log = redis.call('GET', key)
local len, c, head = 0, 0, old
if log then
  len = #log / 7
  head = unpack('<I7', log, #log - 6)
  c = len
  if unpack('<I7', log) <= old then
    -- the window holds the newest c: bisect for the oldest time in it (none:
    -- c = 0)
    local lo, hi = 1, len
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if unpack('<I7', log, mid * 7 + 1) <= old then lo = mid + 1 else hi = mid end
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
    retry = unpack('<I7', log, (len - 1 - n + cost) * 7 + 1) + period - now
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
      local ttl = PERIOD_MS
      if reset ~= period or GRACE ~= 0 or not ttl then
        ttl = fmt('%d', ceil(reset / 1000) + GRACE)
      end
      redis.call('SET', key, log, 'PX', ttl)
    end
  end
  ok, rem, retry, delay = 1, n - c - cost, -1, 0
end
