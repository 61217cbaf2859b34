-- Several quotas, all-or-nothing. KEYS: one per quota. ARGV: now ('T' = Redis's
-- clock), cost, then per quota: strategy id, count, period, burst, interval
-- (microseconds), then the nonce when a strategy needs one.
-- Reply: one string of integers: all_ok, then per quota ok, remaining,
-- reset_after, retry_after, delay.
-- Every quota is checked before any is consumed.
local cost = tonumber(ARGV[2])
local nonce = ARGV[3 + 5 * #KEYS]

local function run(i, c, apply)
  local o = 2 + (i - 1) * 5
  return S[tonumber(ARGV[o + 1])](KEYS[i], tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]),
    tonumber(ARGV[o + 4]), tonumber(ARGV[o + 5]), c, nonce, apply)
end

local nq = #KEYS
local res = {}
local all = 1
for i = 1, nq do
  res[i] = { run(i, cost, false) }
  if res[i][1] == 0 then all = 0 end
end
if all == 1 and cost > 0 then
  for i = 1, nq do res[i] = { run(i, cost, true) } end
elseif all == 0 then
  -- nothing is consumed: quotas that would allow report their current state
  for i = 1, nq do
    if res[i][1] == 1 then
      res[i] = { run(i, 0, false) }
    end
  end
end
local out = { tostring(all) }
for i = 1, nq do
  local r = res[i]
  out[i + 1] = string.format('%d %d %d %d %d', r[1], r[2], r[3], r[4], r[5])
end
return table.concat(out, ' ')
