-- Gives back a local budget's unspent units (src/limiter/local_budget.rs), on every
-- quota of the limiter, each as its strategy allows. KEYS: one per quota.
-- ARGV: now ('T' = Redis's clock), units, at (the take's time: its script's
-- NOW), then per quota: strategy id, count, period, burst, interval, then per
-- quota: fin, the take's time plus that quota's reset_after in its reply,
-- or -1 for a quota the take did not consume (a shadow quota that would have
-- denied, src/limiter/joint.rs), which is left as it is.
-- Each G[<id>] block reads key, n, period, burst, interval, units, at, fin
-- and now, and never raises what is left above the limit, never makes a
-- count negative, never touches a window later than the take's, and keeps
-- the key's TTL (or sets the one its new state needs).
--
-- With ARGV[3] = 'A' it is an adjust instead (src/settle.rs: penalize,
-- reward, a settle's excess): each A[<id>] block reads key, n, period, burst,
-- interval, units (> 0: charge, past the limit if need be; < 0: give back,
-- never above the limit; at most 2^50 us of the quota's rate either way,
-- and no state holds a debt longer than that) and now; no fins follow. A
-- C[<id>] block (a strategy that takes a charge but gives nothing back: the
-- leaky bucket) reads the same, and runs for a charge only. A strategy
-- without a block of the kind asked is left as it is.
--
-- With ARGV[3] = 'S' it sets what is left (src/settle.rs: set_remaining):
-- each quota with an A[<id>] block starts afresh (DEL) and is charged the
-- units that follow the quotas, one per quota (its capacity less the
-- remaining asked for); ARGV[2] is unused.
local units, at, set = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[3] == 'S'
local nq = #KEYS
for i = 1, nq do
  local o = 3 + (i - 1) * 5
  local id = tonumber(ARGV[o + 1])
  local f = G[id]
  if not at then
    f = A[id]
    -- (a charge only: in the set mode units is 0)
    if not f and units > 0 then f = C[id] end
  end
  local last = tonumber(ARGV[3 + 5 * nq + i])
  if f and set then
    redis.call('DEL', KEYS[i])
    if last > 0 then
      f(KEYS[i], tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4]),
        tonumber(ARGV[o + 5]), last)
    end
  elseif f and not (at and last < 0) then
    local u = units
    if not at then
      -- an adjust moves a quota by at most what its rate repays in 2^50 us
      -- (about 35.7 years; src/settle.rs, MAX_DEBT): Lua numbers are
      -- doubles, exact below 2^53, and times are us since 1970 (2^50.6)
      local cap = math.floor(1125899906842624 / math.abs(tonumber(ARGV[o + 5])))
      if u > cap then u = cap elseif u < -cap then u = -cap end
    end
    f(KEYS[i], tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4]),
      tonumber(ARGV[o + 5]), u, at, last)
  end
end
return 'OK'
