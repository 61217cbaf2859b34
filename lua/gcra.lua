-- Gcra: token-bucket-equivalent policing in one key (tat.lua follows); an
-- admitted request proceeds at once.
local queue = false
