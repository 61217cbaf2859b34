-- LeakyBucket: a queue of `burst` slots draining one request every `interval`,
-- stored as one timestamp (when the queue is empty again). Admission is the
-- GCRA rule (see tat.lua); an admitted request gets a delay until its slot.
S[5] = function(key, n, period, burst, interval, cost, nonce, apply)
  return tat_policy(key, burst, interval, cost, apply, true)
end
