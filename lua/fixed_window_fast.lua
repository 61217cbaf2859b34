-- FixedWindow fast path: one quota, Redis's clock, a cost that can fit
-- (0 < cost <= n). The client sends it fewer than 4 ARGV, which no other call
-- does, and only what it needs:
--   cost 1:     ARGV[1] = (n - 1) * 2^32 + the window in ms  (both fit)
--   otherwise:  ARGV = n - cost, the window in ms, cost
-- It runs before anything else in the script and defines no function, so a
-- call costs about what a bare INCR script does: every ARGV element, parsed
-- number and formatted string costs Redis a measurable share of a command.
-- Reply: the count p before this request and the key's TTL in ms (0 on the
-- window's first hit, p = 0, whose reset is the whole window), as one integer
-- p * 2^32 + ttl, or as the string "p ttl" when that does not fit in 2^53;
-- the client, which knows n, cost and the window, derives the decision
-- (allowed iff p + cost <= n; a denial writes nothing).
local A = ARGV
if #A < 4 then
  local key, call, cost = KEYS[1], redis.call, A[3]
  -- denied iff p * scale > lim: p > n - cost, or in the packed form
  -- p * 2^32 > (n - 1) * 2^32 + ms, the same as p > n - 1 (ms < 2^32)
  local p, lim, scale = nil, A[1] + 0, 1
  if cost then
    p = redis.pcall('INCRBY', key, cost)
  else
    scale = 4294967296
    p = redis.pcall('INCR', key)
  end
  if type(p) == 'table' then
    -- the write was refused (Redis out of memory, a count at its maximum):
    -- a request the count denies is denied without writing, as the general
    -- path does; one it would admit gets the error
    local c = tonumber(call('GET', key) or '0')
    if c and c * scale > lim then
      local t = call('PTTL', key)
      if t < 0 then t = 0 end
      return string.format('%d %d', c, t)
    end
    return p
  end
  p = p - (cost or 1)
  local ttl = 0
  if p == 0 then
    call('PEXPIRE', key, A[2] or string.format('%d', lim % 4294967296))
  else
    ttl = call('PTTL', key)
    if ttl < 0 then
      -- repair a key found without a TTL
      ttl = (A[2] or lim % 4294967296) + 0
      call('PEXPIRE', key, string.format('%d', ttl))
    end
  end
  if p * scale > lim then
    if cost then call('DECRBY', key, cost) else call('DECR', key) end
  end
  if p < 2097152 and p > -2097152 and ttl < 4294967296 then
    return p * 4294967296 + ttl
  end
  return string.format('%d %d', p, ttl)
end
