-- FixedWindow fast path: one quota, Redis's clock, a cost that can fit. It runs
-- before anything else in the script and defines no function, so a call costs
-- about what a bare INCRBY script does. ARGV as in single.lua. Everything else
-- falls through to the general code.
if ARGV[1] == 'T' then
  local key, cost, n = KEYS[1], 1, tonumber(ARGV[3])
  if ARGV[2] ~= '1' then cost = tonumber(ARGV[2]) end
  if cost > 0 and cost <= n then
    local c = redis.call('INCRBY', key, ARGV[2])
    local ttl
    if c == cost then
      ttl = math.ceil(tonumber(ARGV[4]) / 1000)
      redis.call('PEXPIRE', key, string.format('%d', ttl))
    else
      ttl = redis.call('PTTL', key)
      if ttl < 0 then
        -- repair a key found without a TTL
        ttl = math.ceil(tonumber(ARGV[4]) / 1000)
        redis.call('PEXPIRE', key, string.format('%d', ttl))
      end
    end
    if c > n then
      redis.call('DECRBY', key, ARGV[2])
      return string.format('0 0 %d %d %d 0', n - c + cost, ttl * 1000, ttl * 1000)
    end
    return string.format('1 1 %d %d -1 0', n - c, ttl * 1000)
  end
end
