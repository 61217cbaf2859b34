-- Sets or lifts a block (RateLimiter::block / unblock). KEYS[1]: the block
-- key `{<prefix>:<key>}:!`; ARGV: now ('T' = Redis's clock), the block's
-- length in µs (0: lift it). The key holds the block's end, with a TTL until
-- then (lua/block.lua reads it).
local us = tonumber(ARGV[2])
if us <= 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], fmt('%d', NOW + us), 'PX', fmt('%d', ceil(us / 1000) + GRACE))
end
return 'OK'
