-- GENERATED FILE, do not edit. The script this crate sends to Redis for a
-- limiter with one fixed-window quota of 100 per minute, on Redis's clock, several
-- decisions per call: lua/batch_fast.lua around the fast path.
-- Assembled by LimiterScript::for_quotas (src/store/redis/script.rs) from the
-- files in lua/; everything below this header is sent byte for byte
-- (SCRIPT LOAD, then EVALSHA 871ec918132acf72984386aa4e09e81546f9017f).
-- Regenerate: UPDATE_GENERATED=1 cargo test --all-features --lib generated_scripts
local N, WINDOW_MS, WINDOW = 100, 60000, '60000'
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
-- (Its batch twin, lua/batch_fast.lua, leaves out the line that reads KEYS
-- and ARGV and the final return: keep those two lines as they are.)
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
local reply
if p < 2097152 and p > -2097152 and ttl < 4294967296 then
  reply = p * 4294967296 + ttl
else
  reply = string.format('%d %d', p, ttl)
end
    out[d] = reply
    done = d
  end
end
-- The end of a batch script (lua/batch_one.lua, lua/batch_fast.lua): run(d)
-- decides the decisions from d on, each entry of `out` its reply, `done` the
-- last one decided. An error (a redis.call refused, say WRONGTYPE) fails that
-- decision alone: its entry is 'E' and the error, and the next ones run, in
-- one pcall per error rather than one per decision. What the failed decision
-- wrote before its error stays, as in a call of its own. READONLY (the node
-- is a replica now: a failover) fails the whole call instead, so that the
-- client goes to the new primary.
local first = 1
while true do
  local finished, err = pcall(run, first)
  if finished then break end
  if type(err) == 'table' then err = err.err end
  err = tostring(err)
  if string.sub(err, 1, 8) == 'READONLY' then return redis.error_reply(err) end
  done = done + 1
  out[done] = 'E' .. err
  first = done + 1
end
return out
