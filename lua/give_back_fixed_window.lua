-- Give-back of FixedWindow: only into the take's own window, never below 0
-- (a count given back to 0 is no state: the key goes).
--
-- On Redis's clock the key is a plain counter that holds no start: it is the
-- take's window if it expires when that window ends, at fin (the key's TTL
-- plus the time it was read, in whole ms), give or take half a period, at
-- most a second. The key of any later window expires at least a period after
-- fin, so a give-back that arrives after the window rolled over changes
-- nothing; the slack covers the rounding and a script's TIME lagging the
-- instant Redis reads TTLs against (once per script): a script descheduled
-- on a loaded machine, which 2 ms of slack did not cover. Periods of 4 ms or
-- less give nothing back. With a manual clock the hash holds the window's
-- start: it must be the take's (fin = start + period).
if not MANUAL then
  local c = tonumber(redis.call('GET', key) or '0')
  local pm = ceil(period / 1000)
  if c > 0 and pm > 4 then
    local ttl = redis.call('PTTL', key)
    local slack = math.min(math.floor(pm / 2), 1000)
    if ttl > 0 and math.floor(now / 1000) + ttl <= math.floor(fin / 1000) + slack then
      if units >= c then
        redis.call('DEL', key)
      else
        redis.call('DECRBY', key, fmt('%d', units))
      end
    end
  end
else
  local st = redis.call('HMGET', key, 's', 'c')
  local s, c = tonumber(st[1]), tonumber(st[2])
  if s and c and c > 0 and s + period == fin and now < fin then
    if units >= c then
      redis.call('DEL', key)
    else
      redis.call('HINCRBY', key, 'c', fmt('%d', -units))
    end
  end
end
