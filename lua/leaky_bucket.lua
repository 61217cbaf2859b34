-- LeakyBucket: a queue of `burst` slots draining one request every `interval`,
-- stored as one timestamp (tat.lua follows): GCRA admission, and an admitted
-- request gets a delay until its slot.
local queue = true
