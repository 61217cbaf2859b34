-- A recording limiter's fast path (RateLimiterBuilder::on_denial): this
-- block replaces fixed_window_fast.lua's take-back of a denial, so that the
-- denied units stay counted past the limit, as lua/adjust_fixed_window.lua
-- charges them (RateLimiter::penalize): a count runs up to TOP (n plus what
-- the rate repays in 2^50 us, written in after the quota's numbers) and no
-- further, never lower than it was.
if p > N - (cost or 1) then
  local c = tonumber(cost or 1)
  if p + c > TOP then
    local back = p + c - TOP
    if back > c then back = c end
    redis.call('DECRBY', key, string.format('%d', back))
  end
end
