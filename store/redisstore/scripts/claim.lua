-- claim.lua: hand out jobs that are ready, or whose lease ran out, under a
-- new lease (claim_jobs, from lib.lua).
--
-- KEYS[1]     <p>:engine:queues:paused, the set of paused queue names
-- KEYS[2]     <p>:engine:claims:<digest of the lease>, the claim's record
--             (see claim_jobs): a claim sent again after its answer was lost
--             answers the jobs the first took
-- KEYS[3..]   pairs, one per queue in the order asked: <p>:queue:<q>:ready,
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
-- Returns a pair per claimed job: its new value, and 1 when it was taken
-- over from an expired lease, else 0.

local queues = {}
for q = 3, #KEYS, 2 do
  queues[#queues + 1] = {KEYS[q], KEYS[q + 1], ARGV[4 + (q - 1) / 2]}
end
return claim_jobs(KEYS[1], queues, ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), KEYS[2])
