-- One quota. KEYS[1]; ARGV: now ('T' = Redis's clock), cost, then the two
-- numbers the strategy reads, count and period (microseconds), or burst and
-- interval when READS_BURST (set before the prelude), as one string of two
-- little-endian doubles (exact below 2^53; one struct.unpack costs Redis a
-- third of what two tonumber calls do), then that period (or interval) in
-- whole milliseconds, rounded up, as text (PERIOD_MS: the TTL of a state that
-- ends one period from now, sent as is instead of formatted), then the nonce
-- when the strategy needs one. A cost of 1 is not parsed.
-- The strategy's code is spliced in at the marker below, as a block: no
-- function is created per call.
-- Reply: one string of integers "ok ok remaining reset_after retry_after delay"
-- (one bulk string is much cheaper for clients to parse than an array).
local key, cost, nonce, apply, now = KEYS[1], 1, ARGV[5], true, NOW
if ARGV[2] ~= '1' then cost = tonumber(ARGV[2]) end
local n, period, burst, interval
if READS_BURST then
  burst, interval = struct.unpack('<dd', ARGV[3])
else
  n, period = struct.unpack('<dd', ARGV[3])
end
PERIOD_MS = ARGV[4]
local ok, rem, reset, retry, delay
--@STRATEGY
-- (each formatted number costs Redis about a sixth of a command: the common
-- answer, allowed at once, formats two)
if ok == 1 and delay == 0 then return fmt('1 1 %d %d -1 0', rem, reset) end
return fmt('%d %d %d %d %d %d', ok, ok, rem, reset, retry, delay)
