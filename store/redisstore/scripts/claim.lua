-- claim.lua: hand out jobs that are ready, or whose lease ran out, under a
-- new lease. A claimed job's score becomes its lease end, so an expired
-- lease makes the job claimable again with no sweeper; taking it over counts
-- a new attempt.
--
-- KEYS[1]     <p>:engine:queues:paused, the set of paused queue names
-- KEYS[2..]   pairs, one per queue in the order asked: <p>:queue:<q>:ready,
--             <p>:queue:<q>:jobs
-- ARGV[1]     now (epoch ms)
-- ARGV[2]     leaseUntil (epoch ms)
-- ARGV[3]     the lease
-- ARGV[4]     the most jobs to hand out
-- ARGV[5..]   the queue names, one per pair of KEYS
--
-- A paused queue hands out nothing; the check is in this script so that no
-- claim in flight slips past a pause.
--
-- A job's value is "<attempt> <score> <leaseUntil> <lease>\n<job JSON>".
-- Returns a pair per claimed job: its new value, and 1 when it was taken
-- over from an expired lease, else 0.

local now, until_, lease, max = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local out = {}
for q = 2, #KEYS, 2 do
  if #out / 2 >= max then break end
  local ready, jobs = KEYS[q], KEYS[q + 1]
  local ids = {}
  if redis.call('SISMEMBER', KEYS[1], ARGV[4 + q / 2]) == 0 then
    ids = redis.call('ZRANGEBYSCORE', ready, '-inf', now, 'LIMIT', 0, max - #out / 2)
  end
  for _, id in ipairs(ids) do
    local v = redis.call('HGET', jobs, id)
    if not v then
      -- A ready entry without its job can only be debris; drop it.
      redis.call('ZREM', ready, id)
    else
      local attempt, held, body = string.match(v, '^(%d+) %S+ %S+ ([^\n]*)\n(.*)$')
      attempt = tonumber(attempt)
      if held ~= '' then attempt = attempt + 1 end
      v = string.format('%d %s %s %s\n', attempt, until_, until_, lease) .. body
      redis.call('HSET', jobs, id, v)
      redis.call('ZADD', ready, until_, id)
      out[#out + 1] = v
      out[#out + 1] = held ~= '' and 1 or 0
    end
  end
end
return out
