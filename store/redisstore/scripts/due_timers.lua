-- due_timers.lua: take the timers due at now and hold each until a later
-- time, so that of several instances polling at once only one fires it; the
-- one that does clears it in its run update.
--
-- KEYS[1]  the timers, <p>:engine:timers:due (member = kind:flow:run:step)
-- ARGV[1]  now (epoch ms)
-- ARGV[2]  hold until (epoch ms)
-- ARGV[3]  the most timers to take
--
-- Returns {name, due, name, due...} with each timer's due time before the hold.

local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
for i = 1, #due, 2 do
  redis.call('ZADD', KEYS[1], ARGV[2], due[i])
end
return due
