-- Dispatcher. KEYS: one per quota. ARGV: now (0 = Redis TIME), cost, nonce,
-- then per quota: strategy id, count, period, burst, interval (microseconds).
-- Reply: all_ok, then per quota: ok, remaining, reset_after, retry_after, delay.
-- All quotas are checked before any is consumed: all-or-nothing.
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost = tonumber(ARGV[2])
local nonce = ARGV[3]

local function run(i, c, apply)
  local o = 3 + (i - 1) * 5
  local f = S[tonumber(ARGV[o + 1])]
  return f(KEYS[i], tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4]),
    tonumber(ARGV[o + 5]), now, c, nonce, apply)
end

local nq = #KEYS
if nq == 1 then
  local ok, rem, reset, retry, delay = run(1, cost, true)
  return { ok, ok, rem, reset, retry, delay }
end

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
local out = { all }
for i = 1, nq do
  for j = 1, 5 do out[#out + 1] = res[i][j] end
end
return out
