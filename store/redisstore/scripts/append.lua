-- append.lua: append a batch of events to one context's stream, publish each
-- record on the context's live channel and maintain the indexes, as one
-- atomic step: a batch is stored, published and indexed entirely or not at
-- all, and no reader ever sees one without the others. lib.lua is prepended
-- when the script is loaded: append_events does the storing, publishing and
-- indexing that run_update.lua does too.
--
-- KEYS[1]      the stream, <p>:<type>:<id>
-- KEYS[2]      the type index, <p>:<type>s
-- KEYS[3]      the watched kinds, <p>:engine:kinds:watched (a set of kinds)
-- KEYS[4...]   the idempotency result key (if any), the named indexes the
--              batch's events join and their kind indexes; ARGV says which
--              is where
-- ARGV[1]      the live channel, <p>:<type>:<id>:live (a channel is not a
--              key, so it travels as an argument)
-- ARGV[2]      the context id, the member the indexes gain
-- ARGV[3]      MAXLEN for XADD ~, "0" for an unbounded stream
-- ARGV[4]      position in KEYS of the idempotency result key, "0" for none
-- ARGV[5]      idempotency window in ms
-- ARGV[6]      n, the number of events
-- ARGV[7...]   n bodies (the stored record: a JSON object without id and ts)
-- then         n positions in KEYS of the named index each event joins, "0"
--              for none
-- then         the kind index window in ms, the context type, the length of
--              the kind index keys' prefix <p>:engine:kind:, and n positions
--              in KEYS of each event's kind index, <p>:engine:kind:<kind> (a
--              stream of "t" type, "c" id, "s" entry id, "e" body, trimmed
--              by MINID to the window), written only for watched kinds
-- then         the batch's fingerprint (hex) and "1" when a repeat must carry
--              the same one to be replayed, else "0"
-- then         the position in KEYS of the jobs hash of a job the append
--              requires held ("0" for none), <p>:queue:<queue>:jobs, the
--              job's id and the lease
--
-- Returns {0, id...} for a new append, {1, id, body, id, body...} when the
-- idempotency key was seen (body is "" for an entry trimmed since), {2}
-- when it was seen with another fingerprint and the repeat must match, or
-- {3} when the job is not held by the lease (checked first).
-- The result key holds "f<fingerprint> id id ..."; records written before
-- fingerprints were kept hold the ids alone.


local stream = KEYS[1]
local channel = ARGV[1]
local member = ARGV[2]
local maxlen = tonumber(ARGV[3])
local idem = tonumber(ARGV[4])
local window = tonumber(ARGV[5])
local n = tonumber(ARGV[6])
local kindWindow = tonumber(ARGV[7 + 2 * n])
local ctype = ARGV[8 + 2 * n]
local kindFrom = tonumber(ARGV[9 + 2 * n]) + 1
local fingerprint = ARGV[10 + 3 * n]
local sameRequest = ARGV[11 + 3 * n] == '1'
local heldJobs = tonumber(ARGV[12 + 3 * n])

if heldJobs > 0 and not held_by(KEYS[heldJobs], ARGV[13 + 3 * n], ARGV[14 + 3 * n]) then
  return {3}
end

-- watched caches, by KEYS position, whether a kind index is written: one
-- SISMEMBER per distinct kind of the batch.
local watched = {}
local function isWatched(kx)
  local w = watched[kx]
  if w == nil then
    w = redis.call('SISMEMBER', KEYS[3], string.sub(KEYS[kx], kindFrom)) == 1
    watched[kx] = w
  end
  return w
end

if idem > 0 then
  local seen = redis.call('GET', KEYS[idem])
  if seen then
    local ids = {}
    local seenPrint
    for id in string.gmatch(seen, '%S+') do
      if string.sub(id, 1, 1) == 'f' then seenPrint = string.sub(id, 2) else ids[#ids + 1] = id end
    end
    if sameRequest and seenPrint and seenPrint ~= fingerprint then
      return {2}
    end
    local bodies = {}
    -- A batch's ids are contiguous: no other append can interleave with
    -- this script, so one XRANGE reads the whole batch back.
    for _, entry in ipairs(redis.call('XRANGE', stream, ids[1], ids[#ids])) do
      local f = entry[2]
      for i = 1, #f, 2 do
        if f[i] == 'e' then bodies[entry[1]] = f[i + 1] end
      end
    end
    -- A write, though it changes nothing: a WAIT after this call then
    -- waits for the replicas to have everything up to here, the first
    -- append included (see Options.WaitReplicas).
    local ttl = redis.call('PTTL', KEYS[idem])
    if ttl > 0 then redis.call('PEXPIRE', KEYS[idem], ttl) end
    local out = {1}
    for _, id in ipairs(ids) do
      out[#out + 1] = id
      out[#out + 1] = bodies[id] or ''
    end
    return out
  end
end

local bodies, joins = {}, {}
for i = 1, n do
  bodies[i] = ARGV[6 + i]
  joins[i] = tonumber(ARGV[6 + n + i])
end
local ids = append_events(stream, channel, member, maxlen, KEYS[2], bodies, joins, function(i, id, ms, body)
  local kx = tonumber(ARGV[9 + 2 * n + i])
  if kx > 0 and isWatched(kx) then
    redis.call('XADD', KEYS[kx], 'MINID', '~', math.max(ms - kindWindow, 0), kind_id(KEYS[kx]), 't', ctype, 'c', member, 's', id, 'e', body)
  end
end)

if idem > 0 then
  redis.call('SET', KEYS[idem], 'f' .. fingerprint .. ' ' .. table.concat(ids, ' '), 'PX', window)
end
table.insert(ids, 1, 0)
return ids
