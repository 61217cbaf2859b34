-- GENERATED FILE, do not edit. The script this crate sends to Redis for a
-- limiter with one fixed-window quota of 100 per minute, on Redis's clock, several
-- decisions per call: lua/batch.lua around the fast path.
-- Assembled by LimiterScript::for_quotas (src/store/redis/script.rs) from the
-- files in lua/; everything below this header is sent byte for byte
-- (SCRIPT LOAD, then EVALSHA 1059d0f61f0de008c21803c953995e590a4ab9ee).
-- Regenerate: UPDATE_GENERATED=1 cargo test --all-features --lib generated_scripts
local N, WINDOW_MS, WINDOW = 100, 60000, '60000'
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
-- FixedWindow fast path: a script of its own for one quota on Redis's clock
-- and a cost that can fit (0 < cost <= n), with the quota's numbers written
-- in. The client puts one line before this file:
--   local N, WINDOW_MS, WINDOW = <n>, <window in ms>, '<window in ms>'
-- so a call of cost 1 sends no ARGV at all, and a larger cost only itself
-- (ARGV[1]). Redis builds and fills an ARGV table on every call, and Lua
-- reads a number from text with strtod: each costs Redis more than this
-- script's arithmetic does. Each distinct (n, window) is one more script in
-- Redis's script cache (about 2.5 kB); a process writes at most a few
-- hundred of them (`FastWindow` in src/store/redis/protocol.rs), other
-- quotas take the limiter's general script.
--
-- The key is the count of the window; its TTL is the rest of the window.
-- The count goes up first (a denial takes its units back), so the first
-- command is the only one that can fail: an error (Redis out of memory, a
-- count at its maximum, a key of another type) has written nothing, and the
-- client asks the general script instead, which only reads on a denial.
-- Reply: the count p before this request and the key's TTL in ms (0 on the
-- window's first hit, p = 0, whose reset is the whole window), as one
-- integer p * 2^32 + ttl, or as the string "p ttl" when that does not fit in
-- 2^53; the client, which knows n, cost and the window, derives the
-- decision (allowed iff p + cost <= n; a denial writes nothing).
local key, cost = KEYS[1], ARGV[1]
local p
if cost then
  p = redis.call('INCRBY', key, cost) - cost
else
  p = redis.call('INCR', key) - 1
end
local ttl = 0
if p == 0 then
  redis.call('PEXPIRE', key, WINDOW)
else
  ttl = redis.call('PTTL', key)
  if ttl < 0 then
    -- repair a key found without a TTL
    ttl = WINDOW_MS
    redis.call('PEXPIRE', key, WINDOW)
  end
end
if p > N - (cost or 1) then
  if cost then redis.call('DECRBY', key, cost) else redis.call('DECR', key) end
end
if p < 2097152 and p > -2097152 and ttl < 4294967296 then
  return p * 4294967296 + ttl
end
return string.format('%d %d', p, ttl)
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
