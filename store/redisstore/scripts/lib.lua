-- lib.lua: what the scripts that append events share, prepended to each of
-- them when it is loaded (see scripts.go, which also defines PUBLISH, the
-- command append_events publishes with), so that an append and a run
-- update store, publish and index events the same way, and check a job's
-- lease the same way.

-- iso_ms formats epoch milliseconds exactly like Go's
-- "2006-01-02T15:04:05.000Z07:00" in UTC, so the published record is
-- byte-identical to event.Event.MarshalJSON. The date is H. Hinnant's
-- civil_from_days; Lua numbers are doubles, exact for any entry id ms below
-- 2^53.
local function iso_ms(ms)
  local secs = math.floor(ms / 1000)
  local milli = ms - secs * 1000
  local days = math.floor(secs / 86400)
  local sod = secs - days * 86400
  local hh = math.floor(sod / 3600)
  local mi = math.floor((sod - hh * 3600) / 60)
  local ss = sod - hh * 3600 - mi * 60
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%03dZ', y, m, d, hh, mi, ss, milli)
end

-- append_events adds each of bodies (the stored record: a JSON object without
-- id and ts) to stream, XADD with MAXLEN ~ maxlen ("0": unbounded), publishes
-- the full record on channel with "prev", the id of the entry before it in
-- the stream (left out for a stream's first entry), so that a subscriber that
-- has that entry knows it missed nothing in between without reading the
-- stream; and indexes member: typeIndex (a key) gains it
-- with the first event of a fresh stream, and KEYS[joins[i]] with event i
-- (0: none). Which index an event joins is the store's index rule, decided
-- on the Go side by store.JoinedIndex (store/index.go), which names the keys;
-- every index is a sorted set scored by the ms of the event that added the
-- member, added with NX so a member keeps its first score. each(i, id, ms, body), when given, runs
-- after event i is stored. Returns the entry ids.
local function append_events(stream, channel, member, maxlen, typeIndex, bodies, joins, each)
  local newest = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)
  local fresh = #newest == 0
  local prev = ''
  if not fresh then prev = '"prev":"' .. newest[1][1] .. '",' end
  local ids = {}
  for i, body in ipairs(bodies) do
    local id
    if maxlen > 0 then
      id = redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'e', body)
    else
      id = redis.call('XADD', stream, '*', 'e', body)
    end
    ids[i] = id
    local ms = tonumber(string.match(id, '^(%d+)'))
    redis.call(PUBLISH, channel, '{"id":"' .. id .. '",' .. prev .. '"ts":"' .. iso_ms(ms) .. '",' .. string.sub(body, 2))
    prev = '"prev":"' .. id .. '",'
    if i == 1 and fresh then
      redis.call('ZADD', typeIndex, 'NX', ms, member)
    end
    if joins[i] > 0 then
      redis.call('ZADD', KEYS[joins[i]], 'NX', ms, member)
    end
    if each then each(i, id, ms, body) end
  end
  return ids
end

-- kind_id is the id of the next entry of the kind index at key: "*" (the
-- stream's next id), or with KIND_CLOCK (several shards, each with its own
-- kind index) one from the server's clock in microseconds,
-- <ms>-<microsecond of the ms * 1000>, unless the stream's newest entry is
-- not older. Entries of several shards then merge in the order they were
-- appended in, as far as the servers' clocks agree (see KindEvents).
local function kind_id(key)
  if not KIND_CLOCK then return '*' end
  local t = redis.call('TIME')
  local us = tonumber(t[2])
  local ms = tonumber(t[1]) * 1000 + math.floor(us / 1000)
  local seq = (us % 1000) * 1000
  local newest = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)
  if #newest > 0 then
    local lms, lseq = string.match(newest[1][1], '^(%d+)-(%d+)$')
    lms, lseq = tonumber(lms), tonumber(lseq)
    if lms > ms or (lms == ms and lseq >= seq) then return '*' end
  end
  return string.format('%d-%d', ms, seq)
end

-- held_by says whether the job id of the jobs hash is claimed under lease.
-- A job's value is "<attempt> <score> <leaseUntil> <lease>\n<job JSON>".
local function held_by(jobs, id, lease)
  local v = redis.call('HGET', jobs, id)
  return v and string.match(v, '^%S+ %S+ %S+ ([^\n]*)\n') == lease
end

-- claim_jobs hands out up to max jobs that are ready, or whose lease ran
-- out, under a new lease, from queues ({ready key, jobs key, name} each, in
-- the order asked), skipping those in the paused set. A claimed job's score
-- becomes its lease end, so an expired lease makes the job claimable again
-- with no sweeper; taking it over counts a new attempt. A job's value is
-- "<attempt> <score> <leaseUntil> <lease>\n<job JSON>". Returns a pair per
-- claimed job: its new value, and 1 when it was taken over from an expired
-- lease, else 0.
--
-- With record (a key; false for none) the claim is remembered there until
-- its lease ends, and a claim under the same record finds it: the same call
-- sent again after its answer was lost answers the jobs the first took, as
-- far as the lease still holds them, and claims nothing more. A claim that
-- took nothing leaves no record: sent again, it claims afresh.
local function claim_jobs(paused, queues, now, until_, lease, max, record)
  local out = {}
  if record and redis.call('EXISTS', record) == 1 then
    local taken = redis.call('LRANGE', record, 0, -1)
    for i = 1, #taken, 3 do
      local q = queues[tonumber(taken[i])]
      local v = q and redis.call('HGET', q[2], taken[i + 1])
      if v and string.match(v, '^%S+ %S+ %S+ ([^\n]*)\n') == lease then
        out[#out + 1] = v
        out[#out + 1] = tonumber(taken[i + 2])
      end
    end
    return out
  end
  for qi, q in ipairs(queues) do
    if #out / 2 >= max then break end
    local ready, jobs = q[1], q[2]
    local ids = {}
    if redis.call('SISMEMBER', paused, q[3]) == 0 then
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
        if record then redis.call('RPUSH', record, qi, id, out[#out]) end
      end
    end
  end
  if record and #out > 0 then
    redis.call('PEXPIRE', record, math.max(tonumber(until_) - tonumber(now), 1))
  end
  return out
end

-- (end of lib.lua)
