-- TokenBucket: `burst` tokens, one more every `interval`, stored as one
-- integer: the time the bucket is full again (tat.lua follows). With t tokens
-- counted at time s, that time is s + (burst - t) * interval; the tokens at
-- `now` are burst - ceil((full - now) / interval). Taking `cost` tokens pushes
-- it by cost * interval, which is the GCRA's theoretical arrival time: same
-- admission, remaining, reset and retry; an admitted request proceeds at once.
local queue = false
