-- Batching (src/store/redis/batch.rs): several decisions of one limiter in
-- one script call, each decided on its own, exactly as a call of its own
-- would decide it: same keys, same answers, same TTLs.
--
-- KEYS: each decision's keys in turn, KN of them per decision.
-- ARGV: KN; AN, the arguments per decision; SP, how many of those come before
-- the shared ones; SN, the shared arguments (the quotas' numbers, sent once);
-- the SN shared arguments; then AN arguments per decision. An empty argument
-- is left out of the decision's ARGV (a nonce the call has not, the fast
-- path's cost of 1, which it sends as no argument).
--
-- Each decision runs the limiter's own script, spliced in below as the
-- function DECIDE (one closure per call, not per decision), with its own KEYS
-- and ARGV, under pcall: an error fails that decision only, and what it wrote
-- before the error stays, as in a call of its own. READONLY (the node is a
-- replica now: a failover) fails the whole call instead, so that the client
-- goes to the new primary. On Redis's clock, TIME is read once per call, by
-- the first decision that needs it (Redis does not advance its clock for
-- keys during a script either).
-- Reply: one entry per decision, in order: its own script's reply, or 'E'
-- followed by its error.
local BATCH_KEYS, BATCH_ARGV = KEYS, ARGV
local KN, AN, SP, SN = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local BATCH_TIME
local function DECIDE(KEYS, ARGV)
--@DECISION
end
local out = {}
for i = 0, (#BATCH_ARGV - 4 - SN) / AN - 1 do
  local keys, argv, n, a = {}, {}, 0, 4 + SN + i * AN
  for j = 1, KN do keys[j] = BATCH_KEYS[i * KN + j] end
  for j = 1, SP do
    local v = BATCH_ARGV[a + j]
    if v ~= '' then n = n + 1; argv[n] = v end
  end
  for j = 1, SN do n = n + 1; argv[n] = BATCH_ARGV[4 + j] end
  for j = SP + 1, AN do
    local v = BATCH_ARGV[a + j]
    if v ~= '' then n = n + 1; argv[n] = v end
  end
  local ok, r = pcall(DECIDE, keys, argv)
  if not ok then
    if type(r) == 'table' then r = r.err end
    r = tostring(r)
    if string.sub(r, 1, 8) == 'READONLY' then return redis.error_reply(r) end
    r = 'E' .. r
  end
  out[i + 1] = r
end
return out
