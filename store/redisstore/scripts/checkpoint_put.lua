-- checkpoint_put.lua: store one checkpoint of a context and drop its oldest
-- beyond the limit, as one step, so concurrent writers never leave more.
--
-- KEYS[1]  the checkpoints hash, <p>:<type>:<id>:checkpoints
-- KEYS[2]  the stream, <p>:<type>:<id>
-- ARGV[1]  the field: the checkpoint's id as two zero-padded 20-digit
--          numbers, "<ms>-<seq>", so string order is id order
-- ARGV[2]  the encoded state
-- ARGV[3]  how many checkpoints to keep
--
-- The hash takes the stream's remaining time to live, so it never outlives
-- the stream: a stream that expired and was written again must not be
-- rebuilt from the old stream's checkpoints.
--
-- Returns 1, or 0 when the stream does not exist and nothing was stored.

local ttl = redis.call('PTTL', KEYS[2])
if ttl == -2 then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local fields = redis.call('HKEYS', KEYS[1])
local keep = tonumber(ARGV[3])
if #fields > keep then
  table.sort(fields)
  for i = 1, #fields - keep do
    redis.call('HDEL', KEYS[1], fields[i])
  end
end
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
else
  redis.call('PERSIST', KEYS[1])
end
return 1
