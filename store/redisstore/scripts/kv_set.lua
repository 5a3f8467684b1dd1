-- kv_set.lua: write fields into a KV record, creating it if needed; the TTL
-- stays as it is.
-- KEYS[1] the record's hash
-- ARGV[1] the most fields the record may have afterwards
-- ARGV[2..] field, value, field, value, ... (at least one pair)
-- Returns the new version, or -2 when the write would exceed the field limit.
local new = 0
for i = 2, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then
    new = new + 1
  end
end
-- HLEN counts the version field _v as well, once the record exists.
local have = redis.call('HLEN', KEYS[1])
if have > 0 then
  have = have - 1
end
if have + new > tonumber(ARGV[1]) then
  return -2
end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
return redis.call('HINCRBY', KEYS[1], '_v', 1)
