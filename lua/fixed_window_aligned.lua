-- FixedWindow aligned to the epoch (Quota::aligned): the windows are
-- [k * period, (k + 1) * period) in the clock's microseconds since the Unix
-- epoch (Redis's TIME, or the manual or caller clock's time), as
-- envoyproxy/ratelimit counts them: a window of one minute runs from :00 to
-- :00 on every key at once.
--
-- The key is a hash {s = the window's start, c = its count} on every clock,
-- with a TTL of the rest of the window. A key of an earlier window (kept up to
-- a millisecond past its end by the TTL's rounding, or longer under a manual
-- clock, whose time need not follow TTLs) counts as no state; a window ahead
-- of now (the clock went back) stays the window until it ends.
local s = math.floor(now / period) * period
local st = redis.call('HMGET', key, 's', 'c')
local ws, c = tonumber(st[1]), tonumber(st[2])
if not ws or not c or ws < s then c = 0 else s = ws end
local left = s + period - now
if cost > n or c + cost > n then
  ok, rem, reset, retry, delay = 0, n - c, 0, -1, 0
  if c > 0 then reset = left end
  if cost <= n then retry = left end
  if reset > 0 and redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, fmt('%d', ceil(reset / 1000) + GRACE))
  end
else
  if apply and cost > 0 then
    if c == 0 then
      redis.call('HSET', key, 's', fmt('%d', s), 'c', fmt('%d', cost))
    else
      redis.call('HINCRBY', key, 'c', fmt('%d', cost))
    end
    redis.call('PEXPIRE', key, fmt('%d', ceil(left / 1000) + GRACE))
  end
  ok, rem, reset, retry, delay = 1, n - c - cost, 0, -1, 0
  if c + cost > 0 then reset = left end
end
