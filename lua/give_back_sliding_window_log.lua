-- Give-back of SlidingWindowLog: the take logged its units at one time,
-- fin - period (its reset_after is that time plus the period, from its NOW);
-- up to `units` entries of exactly that time are removed while it is still
-- in the window (entries of equal time are interchangeable). Exact. An empty
-- list is no key; the TTL is kept.
local t = fin - period
if t > now - period then
  redis.call('LREM', key, fmt('%d', units), fmt('%d', t))
end
