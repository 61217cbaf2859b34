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
if #ARGV < 4 then
  local key, call, cost = KEYS[1], redis.call, ARGV[3]
  local p, t, ms, arg
  if cost then
    t, arg = ARGV[1] + 0, ARGV[2]
    p = call('INCRBY', key, cost) - cost
  else
    local x = ARGV[1] + 0
    ms = x % 4294967296
    t = (x - ms) / 4294967296
    p = call('INCR', key) - 1
  end
  local ttl = 0
  if p == 0 then
    call('PEXPIRE', key, arg or string.format('%d', ms))
  else
    ttl = call('PTTL', key)
    if ttl < 0 then
      -- repair a key found without a TTL
      if arg then ttl = arg + 0 else ttl = ms end
      call('PEXPIRE', key, arg or string.format('%d', ms))
    end
  end
  if p > t then
    if cost then call('DECRBY', key, cost) else call('DECR', key) end
  end
  if p < 2097152 and p > -2097152 and ttl < 4294967296 then
    return p * 4294967296 + ttl
  end
  return string.format('%d %d', p, ttl)
end
