-- restore.lua: bring an archived context back as one atomic step: its events
-- with their original ids, the index entries append.lua would have made for
-- them, and, for a run, its record and status index entry as run_update.lua
-- writes them. Nothing is written when the stream or the record exists, so a
-- restore never merges into history that is already there. The events are
-- not published: nobody can be subscribed to a context that did not exist.
--
-- KEYS[1]     the stream, <p>:<type>:<id>
-- KEYS[2]     the type index, <p>:<type>s
-- KEYS[3...]  the named indexes the events join, and for a run its record
--             (<p>:flows:<flow>:meta:<run>) and status index
--             (<p>:flows:<flow>:status:<status>); ARGV says which is where
--
-- ARGV, read in order:
--   the context id, the member the indexes gain;
--   n, then n entry ids, n bodies, and n positions in KEYS of the named
--   index each event joins ("0": none);
--   the record's position in KEYS ("0": no record), the status index's
--   position, the status index score (startedAt);
--   f, then f field/value pairs of the record.
--
-- Returns {0}, or {1, reason} when the restore is refused.

local a = 0
local function arg()
  a = a + 1
  return ARGV[a]
end

local member = arg()
local n = tonumber(arg())
local ids, bodies, joins = {}, {}, {}
for i = 1, n do ids[i] = arg() end
for i = 1, n do bodies[i] = arg() end
for i = 1, n do joins[i] = tonumber(arg()) end
local record, statusIx, started = tonumber(arg()), tonumber(arg()), arg()

if redis.call('EXISTS', KEYS[1]) == 1 then
  return {1, KEYS[1] .. ' exists'}
end
if record > 0 and redis.call('EXISTS', KEYS[record]) == 1 then
  return {1, KEYS[record] .. ' exists'}
end

for i = 1, n do
  redis.call('XADD', KEYS[1], ids[i], 'e', bodies[i])
  local ms = tonumber(string.match(ids[i], '^(%d+)'))
  if i == 1 then
    redis.call('ZADD', KEYS[2], 'NX', ms, member)
  end
  if joins[i] > 0 then
    redis.call('ZADD', KEYS[joins[i]], 'NX', ms, member)
  end
end

if record > 0 then
  for _ = 1, tonumber(arg()) do
    redis.call('HSET', KEYS[record], arg(), arg())
  end
  redis.call('ZADD', KEYS[statusIx], started, member)
end
return {0}
