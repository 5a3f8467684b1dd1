-- heartbeat.lua: extend a claimed job's lease if the caller still holds it.
--
-- KEYS[1]  <p>:queue:<q>:ready
-- KEYS[2]  <p>:queue:<q>:jobs
-- ARGV[1]  job id
-- ARGV[2]  the caller's lease
-- ARGV[3]  the new lease end (epoch ms)
--
-- Returns {0, value} with the job's new value, {1} when the job is gone, or
-- {2} when another lease holds it.

local id, lease, until_ = ARGV[1], ARGV[2], ARGV[3]
local v = redis.call('HGET', KEYS[2], id)
if not v then return {1} end
local attempt, held, body = string.match(v, '^(%d+) %S+ %S+ ([^\n]*)\n(.*)$')
if held ~= lease then return {2} end
v = attempt .. ' ' .. until_ .. ' ' .. until_ .. ' ' .. lease .. '\n' .. body
redis.call('HSET', KEYS[2], id, v)
redis.call('ZADD', KEYS[1], until_, id)
return {0, v}
