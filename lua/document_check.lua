-- May this user read and write the text document KEYS[1] (a plain string
-- key)? Changes nothing others can see: a document there is written back as
-- it is; when there is none, an empty one is written and deleted within this
-- one atomic call (DEL first: a user refused DEL is refused before anything
-- is written).
local doc = redis.call('GET', KEYS[1])
if doc then
  redis.call('SET', KEYS[1], doc)
else
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[1], '')
  redis.call('DEL', KEYS[1])
end
return 1
