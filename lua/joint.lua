-- Several limiters decided together, all or nothing (src/limiter/joint.rs):
-- each part is one limiter's quotas on one user key, with its own cost and
-- clock. Follows the prelude (READS_TIME true) and every strategy's function
-- S[<id>] (as multi.lua's; no lease-holding strategy) and, in the script of
-- parts whose denial may record, its adjust function A[<id>] or C[<id>] (as
-- lua/give_back.lua's; else A and C are empty).
-- KEYS: every part's quota keys, part after part.
-- ARGV: [1] 'T' when a part is on Redis's clock (TIME is then read once, for
-- every such part), else a part's time; [2] '1' to consume (a denial
-- records), '0' to check only (nothing is consumed or recorded), 'R' for a
-- decision already denied (nothing is consumed; the denial records);
-- [3] the number of parts; then per part: its clock ('T' or its time in
-- microseconds), its cost, its number of quotas, what its denial records
-- (0 nothing, 1 on its quotas that deny, 2 on all its enforced quotas:
-- RateLimiterBuilder::on_denial), then per quota: strategy id, count,
-- period, burst, interval (as multi.lua), capacity, and 1 if it is a shadow
-- quota, else 0.
-- Reply: one string of integers: 1 if every part was admitted and consumed,
-- then per part: its verdict (1: every enforced quota allows) plus 2 if its
-- denial recorded, its NOW, then per quota: ok, remaining, reset_after,
-- retry_after, delay.
--
-- Every quota of every part is checked before any is consumed (as in
-- multi.lua). A key that several parts count in is checked with the units
-- the parts before it take of it added (capped just past its capacity: the
-- arithmetic stays exact), so the parts must fit together, not only each
-- alone. All admitted, every part is decided again in order, applied: each
-- quota's answer is then exactly that of the parts decided one after the
-- other (every strategy's admission adds up), every key written with its
-- strategy's own state and TTL. Denied (or checked only), nothing is
-- consumed: quotas that would allow report their current state (cost 0),
-- as in multi.lua. Denied (not checked only), a part that records has its
-- cost recorded, part after part, as lua/record.lua records one limiter's
-- (a quota that denies: as checked, with the parts before it on its key),
-- and a quota recorded on reports its state after (as a check of the
-- part's cost, capped just past the capacity, would).
local STORE_NOW = NOW
local APPLY, RECORDS = ARGV[2] == '1', ARGV[2] ~= '0'
local np = tonumber(ARGV[3])

-- a part's clock: the prelude's MANUAL, NOW and GRACE, which the strategy
-- functions read
local function clock(c)
  if c == 'T' then
    MANUAL, NOW, GRACE = false, STORE_NOW, 0
  else
    MANUAL, NOW, GRACE = true, tonumber(c), 60000
  end
end

-- the quota of key KEYS[k], its numbers from ARGV[o]
local function run(k, o, c, apply)
  return S[tonumber(ARGV[o])](KEYS[k], tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]),
    tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4]), c, '', apply)
end

-- where each part's arguments and keys start
local parts = {}
local a, k = 4, 0
for p = 1, np do
  local nq = tonumber(ARGV[a + 2])
  parts[p] = { c = ARGV[a], cost = tonumber(ARGV[a + 1]), nq = nq, rec = tonumber(ARGV[a + 3]),
    o = a + 4, k = k }
  a, k = a + 4 + 7 * nq, k + nq
end

local res, verdict, taken = {}, {}, {}
local all = 1
for p = 1, np do
  local part = parts[p]
  clock(part.c)
  local r, ok = {}, 1
  for i = 1, part.nq do
    local o, key = part.o + (i - 1) * 7, KEYS[part.k + i]
    local c = part.cost + (taken[key] or 0)
    local cap = tonumber(ARGV[o + 5])
    if c > cap then c = cap + 1 end
    r[i] = { run(part.k + i, o, c, false) }
    if r[i][1] == 0 and ARGV[o + 6] ~= '1' then ok = 0 end
  end
  if part.cost > 0 then
    -- what this part takes if admitted: every quota that would allow
    for i = 1, part.nq do
      if r[i][1] == 1 then
        local key = KEYS[part.k + i]
        taken[key] = (taken[key] or 0) + part.cost
      end
    end
  end
  res[p], verdict[p] = r, ok
  if ok == 0 then all = 0 end
end
if not APPLY then all = 0 end

local recorded = {}
for p = 1, np do
  local part = parts[p]
  clock(part.c)
  recorded[p] = 0
  local rec = RECORDS and all == 0 and part.cost > 0 and part.rec
  for i = 1, part.nq do
    local o = part.o + (i - 1) * 7
    if all == 1 then
      -- (a quota that would deny, a shadow one, writes nothing)
      res[p][i] = { run(part.k + i, o, part.cost, true) }
    else
      if rec and rec > 0 and ARGV[o + 6] ~= '1' and (rec == 2 or res[p][i][1] == 0) then
        local id, iv = tonumber(ARGV[o]), tonumber(ARGV[o + 4])
        local u = math.floor(1125899906842624 / math.abs(iv))
        if u > part.cost then u = part.cost end
        local n, period, burst = tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3])
        local done = false
        if A[id] then
          A[id](KEYS[part.k + i], n, period, burst, iv, u)
          done = true
        elseif C[id] then
          C[id](KEYS[part.k + i], n, period, burst, iv, u)
          done = true
        end
        if done then
          recorded[p] = 2
          local c, cap = part.cost, tonumber(ARGV[o + 5])
          if c > cap then c = cap + 1 end
          res[p][i] = { run(part.k + i, o, c, false) }
        end
      end
      if res[p][i][1] == 1 then
        res[p][i] = { run(part.k + i, o, 0, false) }
      end
    end
  end
end

local out = { tostring(all) }
for p = 1, np do
  local part = parts[p]
  clock(part.c)
  out[#out + 1] = fmt('%d %d', verdict[p] + recorded[p], NOW)
  for i = 1, part.nq do
    local r = res[p][i]
    out[#out + 1] = fmt('%d %d %d %d %d', r[1], r[2], r[3], r[4], r[5])
  end
end
return table.concat(out, ' ')
