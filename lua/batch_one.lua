-- One-quota decisions, several per call (src/store/redis/batch.rs): the
-- prelude, then this file with the strategy's block spliced in at the marker,
-- inside a loop over the decisions; each is decided exactly as single.lua
-- would decide it in a call of its own (same keys, same answers, same TTLs).
-- KEYS: one per decision. ARGV: 'T' for Redis's clock (TIME, read once per
-- call) or 'M' (each decision's own time follows), then two letters: 'c' if
-- each decision's cost follows (else '1': every cost is 1, none is sent),
-- 'n' if each decision's nonce follows (else '-'); the quota's two numbers
-- (as in single.lua), its period in ms (PERIOD_MS), then per decision its
-- cost ('c'), its time ('M'), its nonce ('n').
-- Reply: one entry per decision, single.lua's reply or 'E' and an error
-- (lua/batch_end.lua).
local N1, N2 = struct.unpack('<dd', ARGV[3])
PERIOD_MS = ARGV[4]
local COSTS, NONCES = string.sub(ARGV[2], 1, 1) == 'c', string.sub(ARGV[2], 2, 2) == 'n'
local AN, AT = 0, 0
if COSTS then AN = 1 end
if MANUAL then AN = AN + 1; AT = AN end
if NONCES then AN = AN + 1 end
local out, done = {}, 0
local function run(first)
  for d = first, #KEYS do
    local a = 4 + (d - 1) * AN
    local key, cost, nonce, apply, now = KEYS[d], 1, nil, true, NOW
    -- (each decision its own copy: a block may change them, as tat_value.lua
    -- does a tagged interval's sign)
    local n, period, burst, interval
    if READS_BURST then burst, interval = N1, N2 else n, period = N1, N2 end
    if COSTS then
      local c = ARGV[a + 1]
      if c ~= '1' then cost = tonumber(c) end
    end
    if MANUAL then now = tonumber(ARGV[a + AT]) end
    if NONCES then nonce = ARGV[a + AN] end
    local ok, rem, reset, retry, delay
    --@STRATEGY
    if ok == 1 and delay == 0 then
      out[d] = fmt('1 1 %d %d -1 0', rem, reset)
    else
      out[d] = fmt('%d %d %d %d %d %d', ok, ok, rem, reset, retry, delay)
    end
    done = d
  end
end
