-- Gcra: token-bucket-equivalent policing in one key (see tat.lua); an
-- admitted request proceeds at once.
S[6] = function(key, n, period, burst, interval, cost, nonce, apply)
  return tat_policy(key, burst, interval, cost, apply, false)
end
