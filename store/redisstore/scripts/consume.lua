-- consume.lua: with several shards, reserve an entry of the kind index for
-- the run that consumes it, on the entry's own shard, before the run's
-- update on its own (see consume in kinds.go); or give the reservation
-- back.
--
-- KEYS[1]  the entry's consumption marker, <p>:engine:consumed:<kind>:<entry>
-- ARGV[1]  the owner, <flow>:<run>
-- ARGV[2]  the marker's TTL in ms
-- ARGV[3]  "1" to give the owner's reservation back, "0" to reserve
--
-- Returns 0 when the owner holds the entry (or gave it back), 1 when
-- another owner does.

local held = redis.call('GET', KEYS[1])
if ARGV[3] == '1' then
  if held == ARGV[1] then redis.call('DEL', KEYS[1]) end
  return 0
end
if not held then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 0
end
if held == ARGV[1] then return 0 end
return 1
