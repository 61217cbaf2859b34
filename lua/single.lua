-- One quota. KEYS[1]; ARGV: now ('T' = Redis's clock), cost, count, period,
-- burst, interval (microseconds; a fixed window sends only count and period),
-- then the nonce when the strategy needs one.
-- The strategy's code is spliced in at the marker below, as a block: no
-- function is created per call.
-- Reply: one string of integers "ok ok remaining reset_after retry_after delay"
-- (one bulk string is much cheaper for clients to parse than an array).
local key, n, period = KEYS[1], tonumber(ARGV[3]), tonumber(ARGV[4])
local burst, interval = tonumber(ARGV[5]), tonumber(ARGV[6])
local cost, nonce, apply, now = tonumber(ARGV[2]), ARGV[7], true, NOW
local ok, rem, reset, retry, delay
--@STRATEGY
-- (each formatted number costs Redis about a sixth of a command: the common
-- answer, allowed at once, formats two)
if ok == 1 and delay == 0 then return fmt('1 1 %d %d -1 0', rem, reset) end
return fmt('%d %d %d %d %d %d', ok, ok, rem, reset, retry, delay)
