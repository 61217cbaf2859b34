-- The fixed window's fast path, several decisions per call
-- (src/store/redis/batch.rs): after the line of the quota's numbers, this
-- file with fixed_window_fast.lua spliced in at the marker (less its line
-- that reads KEYS[1] and ARGV[1], and its final return), inside a
-- loop over the decisions; each is decided exactly as in a call of its own.
-- KEYS: one per decision. ARGV: none if every cost is 1, else one per
-- decision, its cost ('' for a cost of 1, which the fast path sends as no
-- argument).
-- Reply: one entry per decision, the fast path's reply or 'E' and an error
-- (lua/batch_end.lua).
local out, done = {}, 0
local function run(first)
  for d = first, #KEYS do
    local key, cost = KEYS[d], ARGV[d]
    if cost == '' then cost = nil end
    --@FAST
    out[d] = reply
    done = d
  end
end
