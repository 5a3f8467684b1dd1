-- kv_cas.lua: the KV store's compare-and-swap (store.KV), on a field's
-- value, the record's version or both.
-- KEYS[1] the record's hash
-- ARGV[1] field to compare, '' for none; ARGV[2] the value it must hold
-- ARGV[3] the version the record must have, '0' for any
-- ARGV[4] the most fields the record may have afterwards
-- ARGV[5..] field, value, ... to write when the comparison holds
-- Returns the new version, 0 when the comparison fails, -1 when there is no
-- record, -2 when the write would exceed the field limit.
local v = redis.call('HGET', KEYS[1], '_v')
if not v then
  return -1
end
if ARGV[3] ~= '0' and v ~= ARGV[3] then
  return 0
end
if ARGV[1] ~= '' and redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  return 0
end
local new = 0
for i = 5, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then
    new = new + 1
  end
end
-- HLEN counts _v as well.
if redis.call('HLEN', KEYS[1]) - 1 + new > tonumber(ARGV[4]) then
  return -2
end
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
return redis.call('HINCRBY', KEYS[1], '_v', 1)
