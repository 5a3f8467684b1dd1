-- run_update.lua: one decision of the flow engine about one run, as one
-- atomic step: check the run's version (and the acknowledged job's lease),
-- then write the run's record, move it between the per-status indexes,
-- append, publish and index the events as append.lua does (append_events,
-- from lib.lua, prepended when the script is loaded), and apply the queue and
-- timer changes. Everything is checked before anything is written, so a
-- refused update leaves no trace.
--
-- KEYS[1]     the run's record, <p>:flows:<flow>:meta:<run> (hash)
-- KEYS[2]     the stream the events go to, the run's <p>:flow:<run>
--             unless the update names another
-- KEYS[3]     the stream's type index, <p>:flows
-- KEYS[4]     the timers, <p>:engine:timers:due
-- KEYS[5...]  the flow's status indexes (<p>:flows:<flow>:status:<status>),
--             the named indexes the events join, and the queues' ready sets
--             (<p>:queue:<q>:ready) and job hashes (<p>:queue:<q>:jobs);
--             ARGV says which is where
--
-- ARGV, read in order:
--   channel, the stream's context id, MAXLEN ("0": unbounded), the version read, the new
--   status, startedAt (the status index score);
--   the position in KEYS of the definitions (<p>:engine:flows:defs), the
--   flow's name and the SHA-1 of the definition the update was decided on
--   ("0" "" "": no check);
--   m, then m positions in KEYS of consumption markers
--   (<p>:engine:consumed:<kind>:<entry>) that must not exist yet, then
--   their TTL in ms;
--   the position in KEYS of the paused queues (<p>:engine:queues:paused;
--   "0": none), l, then l queues that must not be paused: those of the jobs
--   enqueued already claimed;
--   k, then k status/position pairs: the index of each status the run may
--   be in, so the run leaves the one its stored record names;
--   f, then f field/value pairs of the record ("" deletes the field);
--   n, then n event bodies, then n positions of the named index each joins;
--   the ack's ready and jobs positions ("0" "0": no ack; a ready position
--   of "0" alone checks the lease and leaves the job), job id, lease;
--   r, then r removals: ready position, jobs position, job id;
--   q, then q jobs: ready position, jobs position, job id, score, value;
--   c, then c timer names to clear;
--   s, then s timer name/due pairs to set;
--   the retention set's position, the run's member there (<flow>:<run>) and
--   its due time ("0": not due, the member leaves the set);
--   the position in KEYS of the idempotency result key the events are
--   remembered under ("0": none), its window in ms and the events'
--   fingerprint (hex), written as append.lua writes it;
--   the most jobs to claim after the rest ("0": no claim), then now, the
--   lease's end, the lease, the position of the paused queues, k, and k
--   queues to claim from: ready position, jobs position, name.
--   last, the record's window in ms and the position in KEYS of the
--   update's record (<p>:engine:updates:<token>; "0": none): an update sent
--   again after its answer was lost finds the record and answers what the
--   first answered, writing nothing.
--
-- A job's value is "<attempt> <score> <leaseUntil> <lease>\n<job JSON>"; a
-- job enqueued claimed is scored, as claim.lua scores it, by its lease's end.
--
-- Returns {0, id...}, or {1, reason} when the update is refused; with a
-- claim, the jobs claim_jobs hands out (from lib.lua) follow the ids as one
-- nested array.

local a = 0
local function arg()
  a = a + 1
  return ARGV[a]
end

local record = tonumber(ARGV[#ARGV])
record = record > 0 and KEYS[record]
if record then
  local done = redis.call('GET', record)
  if done then return cmsgpack.unpack(done) end
end

local channel, member, maxlen = arg(), arg(), tonumber(arg())
local version, status, started = tonumber(arg()), arg(), arg()
local defs, flow, defSHA = tonumber(arg()), arg(), arg()
local consumed = {}
for i = 1, tonumber(arg()) do consumed[i] = KEYS[tonumber(arg())] end
local consumedTTL = arg()
local paused = tonumber(arg())
local leasedQueues = {}
for i = 1, tonumber(arg()) do leasedQueues[i] = arg() end
local statusKeys = {}
for _ = 1, tonumber(arg()) do
  local name, pos = arg(), tonumber(arg())
  statusKeys[name] = KEYS[pos]
end

-- Each redis.call costs about as much as a small command sent by a client,
-- so the record is read with one HMGET and written with one HSET.
local stored = redis.call('HMGET', KEYS[1], 'version', 'status')
local cur, prev = tonumber(stored[1] or '0'), stored[2]
if cur ~= version then
  return {1, 'run is at version ' .. cur .. ', not ' .. version}
end
if defs > 0 and redis.sha1hex(redis.call('HGET', KEYS[defs], flow) or '') ~= defSHA then
  return {1, 'definition of ' .. flow .. ' changed'}
end
for _, k in ipairs(consumed) do
  if redis.call('EXISTS', k) == 1 then
    return {1, 'event ' .. k .. ' already consumed'}
  end
end
-- A job enqueued already claimed skips claim.lua and its pause check.
for _, q in ipairs(leasedQueues) do
  if redis.call('SISMEMBER', KEYS[paused], q) == 1 then
    return {1, 'queue ' .. q .. ' is paused'}
  end
end

local fields = {}
for i = 1, tonumber(arg()) do
  fields[i] = {arg(), arg()}
end
local n = tonumber(arg())
local bodies, joins = {}, {}
for i = 1, n do bodies[i] = arg() end
for i = 1, n do joins[i] = tonumber(arg()) end

local ackReady, ackJobs, ackID, ackLease = tonumber(arg()), tonumber(arg()), arg(), arg()
if ackJobs > 0 then
  if not held_by(KEYS[ackJobs], ackID, ackLease) then
    return {1, 'job ' .. ackID .. ' is not held by lease ' .. ackLease}
  end
  if ackReady > 0 then
    redis.call('HDEL', KEYS[ackJobs], ackID)
    redis.call('ZREM', KEYS[ackReady], ackID)
  end
end

local set, del = {'version', string.format('%d', cur + 1)}, {}
for _, f in ipairs(fields) do
  if f[2] == '' then
    del[#del + 1] = f[1]
  else
    set[#set + 1] = f[1]
    set[#set + 1] = f[2]
  end
end
-- A run with no record yet has no fields to delete.
if #del > 0 and (cur > 0 or prev) then redis.call('HDEL', KEYS[1], unpack(del)) end
redis.call('HSET', KEYS[1], unpack(set))
if prev ~= status then
  if prev and statusKeys[prev] then redis.call('ZREM', statusKeys[prev], member) end
  redis.call('ZADD', statusKeys[status], started, member)
end

for _, k in ipairs(consumed) do
  redis.call('SET', k, member, 'PX', consumedTTL)
end

local out = append_events(KEYS[2], channel, member, maxlen, KEYS[3], bodies, joins)

for _ = 1, tonumber(arg()) do
  local ready, jobs, id = tonumber(arg()), tonumber(arg()), arg()
  redis.call('HDEL', KEYS[jobs], id)
  redis.call('ZREM', KEYS[ready], id)
end
for _ = 1, tonumber(arg()) do
  local ready, jobs, id, score, value = tonumber(arg()), tonumber(arg()), arg(), arg(), arg()
  redis.call('HSET', KEYS[jobs], id, value)
  redis.call('ZADD', KEYS[ready], score, id)
end
for _ = 1, tonumber(arg()) do
  redis.call('ZREM', KEYS[4], arg())
end
for _ = 1, tonumber(arg()) do
  local name, due = arg(), arg()
  redis.call('ZADD', KEYS[4], due, name)
end
local expiring, expMember, expAt = tonumber(arg()), arg(), tonumber(arg())
if expAt > 0 then
  redis.call('ZADD', KEYS[expiring], expAt, expMember)
else
  redis.call('ZREM', KEYS[expiring], expMember)
end
local idem, window, fingerprint = tonumber(arg()), arg(), arg()
if idem > 0 and #out > 0 then
  redis.call('SET', KEYS[idem], 'f' .. fingerprint .. ' ' .. table.concat(out, ' '), 'PX', window)
end
local claimMax = tonumber(arg())
local claimed
if claimMax > 0 then
  local now, until_, lease, pausedAt = arg(), arg(), arg(), tonumber(arg())
  local queues = {}
  for i = 1, tonumber(arg()) do
    queues[i] = {KEYS[tonumber(arg())], KEYS[tonumber(arg())], arg()}
  end
  claimed = claim_jobs(KEYS[pausedAt], queues, now, until_, lease, claimMax, false)
end
table.insert(out, 1, 0)
if claimed then out[#out + 1] = claimed end
if record then redis.call('SET', record, cmsgpack.pack(out), 'PX', arg()) end
return out
