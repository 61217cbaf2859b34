-- One quota. KEYS[1]; ARGV: now (0 = Redis's clock), cost, nonce, strategy id,
-- count, period, burst, interval (microseconds).
-- Reply: ok, ok, remaining, reset_after, retry_after, delay.
local ok, rem, reset, retry, delay = S[tonumber(ARGV[4])](KEYS[1], tonumber(ARGV[5]),
  tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[2]), ARGV[3], true)
return { ok, ok, rem, reset, retry, delay }
