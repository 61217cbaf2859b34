-- A recording limiter of one quota (RateLimiterBuilder::on_denial): spliced
-- in after the strategy's block in single.lua, whose arguments then carry
-- all four numbers (count, period, burst, interval: four little-endian
-- doubles). A denial records its cost as RateLimiter::penalize would (the
-- strategy's adjust block, lua/adjust_<name>.lua, spliced in below, charged
-- at most what the rate repays in 2^50 us), then the strategy's block runs
-- again consuming nothing, so that the reply shows the state after (retry:
-- when the cost fits again), its first number 2 (denied, recorded). Each
-- block reads the interval as sent (SENT_INTERVAL: negative for a named
-- quota, which tat_value.lua turns positive as it reads it).
local RECORDED = 0
if ok == 0 and cost > 0 then
  interval = SENT_INTERVAL
  local units = math.floor(1125899906842624 / math.abs(interval))
  if units > cost then units = cost end
  do
--@ADJUST
  end
  apply = false
  interval = SENT_INTERVAL
--@STRATEGY
  RECORDED = 2
end
