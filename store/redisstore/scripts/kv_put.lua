-- kv_put.lua: replace a KV record, keeping its version count.
-- KEYS[1] the record's hash
-- ARGV[1] TTL in ms, 0 for none; ARGV[2..] field, value, field, value, ...
-- Returns the new version. The version lives in the field _v, a name no
-- client field may have.
local v = tonumber(redis.call('HGET', KEYS[1], '_v') or '0') + 1
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], '_v', v, unpack(ARGV, 2))
if ARGV[1] ~= '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return v
