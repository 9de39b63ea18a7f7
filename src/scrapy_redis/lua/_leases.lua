-- Included (scrapy_redis.scripts) by the scripts that lease and release: not a script.
-- A lease record is the msgpack array {op, key, key2, arg, entry, entry...}: where its
-- entries go back to, then the entries one pop leased under one id, in pop order. An
-- entry whose work is done is replaced by false; the lease is deleted when none is left.

--#include _chunks.lua

-- Whether a record still holds an entry.
local function holds_entries(record)
  for i = 5, #record do
    if record[i] then
      return true
    end
  end
  return false
end

-- Release the leases ARGV names from index `first` on, as groups (lease id, n, n
-- positions): n = 0 releases the whole lease; otherwise the entries at those positions
-- (1 = the record's first entry) are done.
local function release_leases(leases_key, deadlines_key, first)
  local whole = {}
  local i = first
  while i <= #ARGV do
    local id, n = ARGV[i], tonumber(ARGV[i + 1])
    if n == 0 then
      whole[#whole + 1] = id
    else
      local raw = redis.call('HGET', leases_key, id)
      if raw then
        local record = cmsgpack.unpack(raw)
        for j = i + 2, i + 1 + n do
          local at = 4 + tonumber(ARGV[j])
          if at > 4 and at <= #record then
            record[at] = false
          end
        end
        if holds_entries(record) then
          redis.call('HSET', leases_key, id, cmsgpack.pack(record))
        else
          whole[#whole + 1] = id
        end
      end
    end
    i = i + 2 + n
  end
  call_in_chunks('HDEL', leases_key, whole)
  call_in_chunks('ZREM', deadlines_key, whole)
end

-- The packed record of a popped batch: {op, key, key2, arg, entries...}.
local function pack_record(op, key, key2, arg, entries)
  local record = {op, key, key2, arg}
  for i, entry in ipairs(entries) do
    record[4 + i] = entry
  end
  return cmsgpack.pack(record)
end

-- Lease a popped batch under one id: its packed record, with a deadline in ms from now
-- (server clock).
local function lease(leases_key, deadlines_key, id, timeout_ms, packed)
  local now = redis.call('TIME')
  local deadline = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(timeout_ms)
  redis.call('HSET', leases_key, id, packed)
  redis.call('ZADD', deadlines_key, deadline, id)
end
