elseif all == 0 then
  -- a denial records its cost (RateLimiterBuilder::on_denial; in the scripts
  -- of recording limiters only, which replace multi.lua's branch with this
  -- file): RECORD 1 on each enforced quota that denies it, 2 on every
  -- enforced quota, as RateLimiter::penalize would (lua/give_back.lua: A[<id>],
  -- or C[<id>] for a charge only; at most what the quota's rate repays in
  -- 2^50 us); a recorded quota then reports its state after, as a check of the
  -- same cost would (retry: when the cost fits again). Quotas that would
  -- allow report their current state (cost 0), as multi.lua's do.
  for i = 1, nq do
    if cost > 0 and not SHADOW[i] and (RECORD == 2 or res[i][1] == 0) then
      local o = 2 + (i - 1) * 5
      local id, iv = tonumber(ARGV[o + 1]), tonumber(ARGV[o + 5])
      local u = math.floor(1125899906842624 / math.abs(iv))
      if u > cost then u = cost end
      local n, period, burst = tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4])
      local done = false
      if A[id] then
        A[id](KEYS[i], n, period, burst, iv, u)
        done = true
      elseif C[id] then
        C[id](KEYS[i], n, period, burst, iv, u)
        done = true
      end
      if done then
        RECORDED = 2
        res[i] = { run(i, cost, false) }
      end
    end
    if res[i][1] == 1 then
      res[i] = { run(i, 0, false) }
    end
  end
end
