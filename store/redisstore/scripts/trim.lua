-- Trim drops the stream's entries below a bound, never its newest entry, so
-- XADD keeps giving ids after it and the stream key (with its TTL) stays.
--
-- KEYS[1]  the stream
-- ARGV[1]  the bound "<ms>-<seq>": entries with smaller ids go
--
-- Returns the number of entries removed.
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last == 0 then
  return 0
end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local bound = ARGV[1]
local bms, bseq = parse(bound)
local lms, lseq = parse(last[1][1])
if bms > lms or (bms == lms and bseq > lseq) then
  bound = last[1][1]
end
return redis.call('XTRIM', KEYS[1], 'MINID', bound)
