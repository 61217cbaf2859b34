-- FixedWindow of a calendar (Quota::calendar): months or years of a time
-- zone, whose bounds Lua cannot compute. The client sends them with each
-- call, from its own clock: period = b, the end of the client's window, in
-- us since the epoch; burst = l1 * 2^25 + l2, the lengths in whole seconds
-- of that window [a, b) and of the next [b, c) (tz offsets are whole
-- seconds, so are the bounds; a year is below 2^25 s). The window is the one
-- of the three ([.., a), [a, b), [b, c)) that holds now: near a bound Redis's
-- clock decides, not the client's.
--
-- The key is a hash {e = the window's end, c = its count}, with a TTL of the
-- rest of the window. A key of an earlier window counts as no state; a
-- window ahead of now (the clock went back) stays the window until it ends.
-- A clock a whole window past the client's counts in [b, c) until 1 us
-- before its end. (One quota: single.lua unpacks only n and period from
-- ARGV[3], which holds burst third.)
if not burst then burst = select(3, struct.unpack('<ddd', ARGV[3])) end
local l1 = math.floor(burst / 33554432)
local e = period
if now < period - l1 * 1000000 then
  e = period - l1 * 1000000
elseif now >= period then
  e = period + (burst - l1 * 33554432) * 1000000
end
local st = redis.call('HMGET', key, 'e', 'c')
local we, c = tonumber(st[1]), tonumber(st[2])
if not we or not c or we < e then c = 0 else e = we end
local left = e - now
if left < 1 then left = 1 end
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
      redis.call('HSET', key, 'e', fmt('%d', e), 'c', fmt('%d', cost))
    else
      redis.call('HINCRBY', key, 'c', fmt('%d', cost))
    end
    redis.call('PEXPIRE', key, fmt('%d', ceil(left / 1000) + GRACE))
  end
  ok, rem, reset, retry, delay = 1, n - c - cost, 0, -1, 0
  if c + cost > 0 then reset = left end
end
