-- Put leased entries back where they were popped from, at the end popped next.
-- KEYS[1] = the leases hash: lease id -> cmsgpack {op, key, key2, arg, entry...}
-- KEYS[2] = the lease deadlines sorted set
-- KEYS[3..n] = every key the records name (read them first: lease_expired.lua or HMGET)
-- ARGV[1] = "expired" to put back only leases past their deadline, "all" for any
-- ARGV[2..n] = groups of (lease id, n, n positions), the most recently popped lease
--              first: n = 0 puts back every entry of the lease still held, otherwise
--              the entries at those positions (1 = the first)
-- returns how many entries were put back
-- Record ops: "rpush"/"lpush" (list queue or list of start messages), "prio" (LPUSH to a
-- priority list key, ZADD its priority arg to the index key2), "zadd" (score arg), "sadd".
--#include _leases.lua

local declared = {}
for i = 3, #KEYS do
  declared[KEYS[i]] = true
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)

-- Push entries back so that the first of them is popped first.
local function put_back(op, key, key2, arg, entries)
  if #entries == 0 then
    return
  end
  local reversed = {}
  for i = #entries, 1, -1 do
    reversed[#reversed + 1] = entries[i]
  end
  if op == 'rpush' then
    call_in_chunks('RPUSH', key, reversed)
  elseif op == 'lpush' then
    call_in_chunks('LPUSH', key, reversed)
  elseif op == 'prio' then
    call_in_chunks('LPUSH', key, reversed)
    redis.call('ZADD', key2, -tonumber(arg), arg)
  elseif op == 'zadd' then
    for _, entry in ipairs(entries) do
      redis.call('ZADD', key, arg, entry)
    end
  elseif op == 'sadd' then
    call_in_chunks('SADD', key, entries)
  end
end

local requeued = 0
local i = 2
while i <= #ARGV do
  local id, n = ARGV[i], tonumber(ARGV[i + 1])
  local raw = redis.call('HGET', KEYS[1], id)
  local deadline = tonumber(redis.call('ZSCORE', KEYS[2], id))
  if raw and (ARGV[1] == 'all' or deadline == nil or deadline < ms) then
    local record = cmsgpack.unpack(raw)
    local op, key, key2, arg = record[1], record[2], record[3], record[4]
    if not declared[key] or (op == 'prio' and not declared[key2]) then
      return redis.error_reply('lease ' .. id .. ' names a key not in KEYS')
    end
    local positions = {}
    if n == 0 then
      for p = 1, #record - 4 do
        positions[p] = p
      end
    else
      for j = 1, n do
        positions[j] = tonumber(ARGV[i + 1 + j])
      end
      table.sort(positions)
    end
    local entries = {}
    for _, p in ipairs(positions) do
      if p >= 1 and record[4 + p] then
        entries[#entries + 1] = record[4 + p]
        record[4 + p] = false
      end
    end
    put_back(op, key, key2, arg, entries)
    requeued = requeued + #entries
    if holds_entries(record) then
      redis.call('HSET', KEYS[1], id, cmsgpack.pack(record))
    else
      redis.call('HDEL', KEYS[1], id)
      redis.call('ZREM', KEYS[2], id)
    end
  end
  i = i + 2 + n
end
return requeued
