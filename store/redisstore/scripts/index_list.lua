-- index_list.lua: one page of a sorted-set index, highest score first and
-- equal scores by member ascending, the order every nqd backend shares.
-- ZREVRANGE alone orders equal scores by member descending, so each run of
-- equal scores in the page is put right: a run wholly inside the page is
-- reversed; a run cut by the page's edge is read again with ZRANGEBYSCORE,
-- which orders members ascending, from its correct offset.
--
-- KEYS[1]  the index
-- ARGV[1]  offset
-- ARGV[2]  limit (> 0)
--
-- Returns {total, member, score, member, score...}.

local key = KEYS[1]
local offset = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])

local total = redis.call('ZCARD', key)
local out = {total}
local page = redis.call('ZREVRANGE', key, offset, offset + limit - 1, 'WITHSCORES')
local n = #page / 2
local i = 1
while i <= n do
  local score = page[2 * i]
  local j = i
  while j < n and page[2 * (j + 1)] == score do j = j + 1 end
  if i == 1 or j == n then
    local higher = redis.call('ZCOUNT', key, '(' .. score, '+inf')
    local from = offset + i - 1 - higher
    local members = redis.call('ZRANGEBYSCORE', key, score, score, 'LIMIT', from, j - i + 1)
    for _, m in ipairs(members) do
      out[#out + 1] = m
      out[#out + 1] = score
    end
  else
    for k = j, i, -1 do
      out[#out + 1] = page[2 * k - 1]
      out[#out + 1] = score
    end
  end
  i = j + 1
end
return out
