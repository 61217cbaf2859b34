-- One quota. KEYS[1]; ARGV: now (0 = Redis's clock), cost, count, period,
-- burst, interval (microseconds; a fixed window sends only count and period),
-- then the nonce when the strategy needs one.
-- Reply: one string of integers "ok ok remaining reset_after retry_after delay"
-- (one bulk string is much cheaper for clients to parse than an array).
local _, f = next(S)
local ok, rem, reset, retry, delay = f(KEYS[1], tonumber(ARGV[3]), tonumber(ARGV[4]),
  tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[2]), ARGV[7], true)
return string.format('%d %d %d %d %d %d', ok, ok, rem, reset, retry, delay)
