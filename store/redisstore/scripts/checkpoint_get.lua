-- checkpoint_get.lua: find a context's newest checkpoint at or before an id.
--
-- KEYS[1]  the checkpoints hash, <p>:<type>:<id>:checkpoints
-- ARGV[1]  the bound, formatted like the hash's fields (checkpoint_put.lua)
--
-- Returns {field, state}, or nil when there is none.

local best = nil
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if f <= ARGV[1] and (best == nil or f > best) then
    best = f
  end
end
if best == nil then
  return nil
end
return {best, redis.call('HGET', KEYS[1], best)}
