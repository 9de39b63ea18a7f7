-- Put leased entries back where they were popped from, at the end popped next; in
-- "expired" mode, count the delivery that ended with its worker gone, and move an entry
-- delivered that many times to the dead letters instead (a request that kills or hangs
-- every worker that takes it).
-- KEYS[1] = the leases hash: lease id -> cmsgpack {op, key, key2, arg, entry...}
-- KEYS[2] = the lease deadlines sorted set
-- KEYS[3] = the deliveries hash: sha1 of an entry -> deliveries ended by a dead worker
-- KEYS[4] = the dead letters list: cmsgpack {op, key, key2, arg, entry}, one per entry
--           (a per-slot queue's: its request, see dead_letter() in _leases.lua)
-- KEYS[5..n] = every key the records name (read them first: lease_expired.lua or HMGET)
-- ARGV[1] = "expired" to put back only leases past their deadline, "all" for any (a
--           graceful give-back: no delivery is counted)
-- ARGV[2] = deliveries after which an entry is a dead letter (0: never)
-- ARGV[3..n] = groups of (lease id, n, n positions), the most recently popped lease
--              first: n = 0 puts back every entry of the lease still held, otherwise
--              the entries at those positions (1 = the first)
-- returns {entries put back, entries moved to the dead letters}
--#include _leases.lua

-- Fail before writing anything if the deliveries or dead letters key has another type:
-- deliveries counted before a failing RPUSH would be counted again on every retry.
for _, pair in ipairs({{KEYS[3], 'hash'}, {KEYS[4], 'list'}}) do
  local found = redis.call('TYPE', pair[1])['ok']
  if found ~= 'none' and found ~= pair[2] then
    return redis.error_reply('WRONGTYPE ' .. pair[1] .. ' holds a ' .. found .. ', not a ' .. pair[2])
  end
end

local declared = {}
for i = 5, #KEYS do
  declared[KEYS[i]] = true
end
local expired_only = ARGV[1] == 'expired'
local max_deliveries = tonumber(ARGV[2])
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)

-- The entries that go back, after counting a delivery of each (expired leases only);
-- those delivered max_deliveries times go to the dead letters.
local dead = 0
local function count_deliveries(op, key, key2, arg, entries)
  if op == 'place' then -- an in-flight place (slot_take.lua): given back, nothing else
    return {}
  end
  if not expired_only then
    return entries
  end
  local back = {}
  for _, entry in ipairs(entries) do
    local digest = redis.sha1hex(entry)
    local delivered = redis.call('HINCRBY', KEYS[3], digest, 1)
    if max_deliveries > 0 and delivered >= max_deliveries then
      redis.call('RPUSH', KEYS[4], dead_letter(op, key, key2, arg, entry))
      redis.call('HDEL', KEYS[3], digest)
      dead = dead + 1
    else
      back[#back + 1] = entry
    end
  end
  return back
end

local requeued = 0
local i = 3
while i <= #ARGV do
  local id, n = ARGV[i], tonumber(ARGV[i + 1])
  local raw = redis.call('HGET', KEYS[1], id)
  local deadline = tonumber(redis.call('ZSCORE', KEYS[2], id))
  if raw and (not expired_only or deadline == nil or deadline < ms) then
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
    record_ended(record, entries)
    local back = count_deliveries(op, key, key2, arg, entries)
    put_back(op, key, key2, arg, back)
    requeued = requeued + #back
    store_record(KEYS[1], KEYS[2], id, record)
    forget_done_suspect(KEYS[1], KEYS[3], id)
  end
  i = i + 2 + n
end
return {requeued, dead}
