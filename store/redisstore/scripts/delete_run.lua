-- delete_run.lua: remove a finished run whose retention ended, as one atomic
-- step, unless it is no longer due (resumed, or deleted by another instance).
--
-- KEYS[1]     the retention set, <p>:engine:runs:expiring
-- KEYS[2]     the run's record, <p>:flows:<flow>:meta:<run>
-- KEYS[3]     the run's stream, <p>:flow:<run>
-- KEYS[4]     its checkpoints, <p>:flow:<run>:checkpoints
-- KEYS[5...]  the indexes the run may be in: <p>:flows, <p>:flows:<flow>
--             and the flow's status indexes
-- ARGV[1]     the run's member in the retention set, <flow>:<run>
-- ARGV[2]     the run id, its member in the indexes
-- ARGV[3]     now (ms)
--
-- Returns 0 when the run was removed, 1 when it is not due.

local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not due or tonumber(due) > tonumber(ARGV[3]) then
  return 1
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
for i = 5, #KEYS do
  redis.call('ZREM', KEYS[i], ARGV[2])
end
redis.call('ZREM', KEYS[1], ARGV[1])
return 0
