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
