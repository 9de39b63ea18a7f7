-- Included (scrapy_redis.store.scripts) by the scripts that lease and release: not a script.
-- A lease record is the msgpack array {op, key, key2, arg, entry, entry...}: where its
-- entries go back to, then the entries one pop leased under one id, in pop order. An
-- entry whose work is done is replaced by false; the lease is deleted when none is left.
-- Python reads records with scrapy_redis.queues.records only.

--#include _chunks.lua
--#include _slots.lua

-- Whether a record still holds an entry.
local function holds_entries(record)
  for i = 5, #record do
    if record[i] then
      return true
    end
  end
  return false
end

-- The deliveries hash (entry digest -> deliveries that ended with the worker gone) if
-- `key` is given and exists: empty, as it is unless a worker died holding leases, it
-- costs nothing to consult.
local function suspects(key)
  if key and redis.call('EXISTS', key) == 1 then
    return key
  end
  return nil
end

-- Forget the deliveries counted for `entries` (their work is done).
local function forget_deliveries(deliveries, entries)
  if deliveries and #entries > 0 then
    local digests = {}
    for i, entry in ipairs(entries) do
      digests[i] = redis.sha1hex(entry)
    end
    call_in_chunks('HDEL', deliveries, digests)
  end
end

-- A suspect is an entry with deliveries counted: a worker died while it held it. Each
-- worker works on at most one suspect at a time, so that the requests it works on
-- meanwhile are not blamed if the suspect kills it too. The deliveries hash marks the
-- suspect a worker holds under the field "@<worker id>": "<lease id>|<position>".

local function suspect_marker(lease_id)
  return '@' .. string.match(lease_id, '^(.*):%d+$')
end

-- Whether the worker of `lease_id` still holds, not done, the suspect it took last.
local function holds_suspect(leases_key, deliveries, lease_id)
  local at = redis.call('HGET', deliveries, suspect_marker(lease_id))
  if not at then
    return false
  end
  local id, position = string.match(at, '^(.*)|(%d+)$')
  local raw = redis.call('HGET', leases_key, id)
  if not raw then
    return false
  end
  return cmsgpack.unpack(raw)[4 + tonumber(position)] and true or false
end

-- Forget the suspect marker of the worker of `lease_id` once that suspect is done.
local function forget_done_suspect(leases_key, deliveries, lease_id)
  if deliveries and not holds_suspect(leases_key, deliveries, lease_id) then
    redis.call('HDEL', deliveries, suspect_marker(lease_id))
  end
end

-- The entries `ended` of a lease record are done or leave the lease (put back, dead
-- letters, set aside): a per-slot queue's record gives back their in-flight places, as
-- does a "place" record (an in-flight place a request outside the queue took, see
-- slot_take.lua: its entry is <slot> NUL <id>).
local function record_ended(record, ended)
  if record[1] == 'slot' or record[1] == 'place' then
    slots_done(record[2], ended)
  end
end

-- Release the leases ARGV names from index `first` on, as groups (lease id, n, n
-- positions): n = 0 releases the whole lease; otherwise the entries at those positions
-- (1 = the record's first entry) are done. `deliveries_key` (optional): the deliveries
-- counted for the released entries are forgotten.
local function release_leases(leases_key, deadlines_key, first, deliveries_key)
  local deliveries = suspects(deliveries_key)
  local whole, done = {}, {}
  local i = first
  while i <= #ARGV do
    local id, n = ARGV[i], tonumber(ARGV[i + 1])
    -- read even for a whole lease: a per-slot queue's record gives back in-flight places
    local raw = redis.call('HGET', leases_key, id)
    if n == 0 then
      whole[#whole + 1] = id
      if raw then
        local record = cmsgpack.unpack(raw)
        local ended = {}
        for at = 5, #record do
          if record[at] then
            done[#done + 1] = record[at]
            ended[#ended + 1] = record[at]
          end
        end
        record_ended(record, ended)
      end
    elseif raw then
      local record = cmsgpack.unpack(raw)
      local ended = {}
      for j = i + 2, i + 1 + n do
        local at = 4 + tonumber(ARGV[j])
        if at > 4 and at <= #record then
          if record[at] then
            done[#done + 1] = record[at]
            ended[#ended + 1] = record[at]
          end
          record[at] = false
        end
      end
      record_ended(record, ended)
      if holds_entries(record) then
        redis.call('HSET', leases_key, id, cmsgpack.pack(record))
      else
        whole[#whole + 1] = id
      end
    end
    i = i + 2 + n
  end
  call_in_chunks('HDEL', leases_key, whole)
  call_in_chunks('ZREM', deadlines_key, whole)
  forget_deliveries(deliveries, done)
  if first <= #ARGV then
    forget_done_suspect(leases_key, deliveries, ARGV[first])
  end
end

-- Which of the popped `items` the worker leasing them under `lease_id` takes: at most
-- `count` of them, at most one suspect, and none while it holds one; the others (to
-- put back) keep their order.
local function select_leasable(leases_key, deliveries_key, lease_id, items, count)
  local deliveries = suspects(deliveries_key)
  if not deliveries or #items == 0 then
    if #items <= count then
      return items, {}
    end
    return {unpack(items, 1, count)}, {unpack(items, count + 1)}
  end
  local digests = {}
  for i, item in ipairs(items) do
    digests[i] = redis.sha1hex(item)
  end
  local counts = {}
  for i = 1, #digests, 1000 do
    local found = redis.call('HMGET', deliveries, unpack(digests, i, math.min(i + 999, #digests)))
    for j = 1, #found do
      counts[i + j - 1] = found[j]
    end
  end
  local busy = holds_suspect(leases_key, deliveries, lease_id)
  local take, back = {}, {}
  for i, item in ipairs(items) do
    if #take >= count then
      back[#back + 1] = item
    elseif not counts[i] then
      take[#take + 1] = item
    elseif busy then
      back[#back + 1] = item
    else
      take[#take + 1] = item
      busy = true
      redis.call('HSET', deliveries, suspect_marker(lease_id), lease_id .. '|' .. #take)
    end
  end
  return take, back
end

-- How many entries a pop looks past when all it popped are suspects this worker may not
-- take now (it holds one): requests behind them need not wait for its suspect.
local LOOK_PAST = 64

-- select_leasable(), and if all `items` are suspects this worker may not take now, the
-- same over them and the next LOOK_PAST entries, which `pop_more(n)` pops.
local function select_looking_past(leases_key, deliveries_key, lease_id, items, count, pop_more)
  local take, back = select_leasable(leases_key, deliveries_key, lease_id, items, count)
  if #take == 0 and #back > 0 then
    local more = pop_more(LOOK_PAST)
    if more then
      for _, item in ipairs(more) do
        back[#back + 1] = item
      end
      take, back = select_leasable(leases_key, deliveries_key, lease_id, back, count)
    end
  end
  return take, back
end

-- Write back a lease record whose entries changed; delete the lease with its last one.
local function store_record(leases_key, deadlines_key, id, record)
  if holds_entries(record) then
    redis.call('HSET', leases_key, id, cmsgpack.pack(record))
  else
    redis.call('HDEL', leases_key, id)
    redis.call('ZREM', deadlines_key, id)
  end
end

-- Push entries back where a record says they came from, so that the first of them is
-- popped first. Record ops: "rpush"/"lpush" (list queue or list of start messages),
-- "prio" (LPUSH to a priority list key, ZADD its priority arg to the index key2),
-- "zadd" (score arg), "sadd", "recur" (a recurring start message: its run at the score
-- arg is due again, if it is still recurring, see pop_start_messages.lua); "place"
-- (an in-flight place: nothing goes back).
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
  elseif op == 'recur' then
    for _, entry in ipairs(entries) do
      redis.call('ZADD', key, 'XX', arg, entry)
    end
  elseif op == 'slot' then
    if arg ~= '' then -- a dead letter's request (see dead_letter()): its member again
      local members = {}
      for i, entry in ipairs(entries) do
        members[i] = key2 .. '\0' .. arg .. entry
      end
      entries = members
    end
    put_back_slots(key, entries)
  end
end

-- A per-slot queue's member split: its slot, its id (priority and sequence, 24 hex) and
-- its request's own bytes.
local function member_parts(member)
  local zero = string.find(member, '\0', 1, true)
  return string.sub(member, 1, zero - 1), string.sub(member, zero + 1, zero + 24),
    string.sub(member, zero + 25)
end

-- The dead letter of `entry`, leased under a record {op, key, key2, arg}: packed {op,
-- key, key2, arg, entry}. A per-slot queue's member is stored as its request's own bytes
-- (as every other queue's dead letters), with its slot as key2 and its id as arg:
-- put_back() makes the member again, which keeps its place in its slot.
local function dead_letter(op, key, key2, arg, entry)
  if op == 'slot' then
    local slot, id, request = member_parts(entry)
    return cmsgpack.pack({op, key, slot, id, request})
  end
  return cmsgpack.pack({op, key, key2, arg, entry})
end

-- What is set aside (<queue>:invalid) of a leased entry of a record of `op`: the entry,
-- or a per-slot queue member's request's own bytes (as every other queue's entries).
local function set_aside_entry(op, entry)
  if op == 'slot' then
    local _, _, request = member_parts(entry)
    return request
  end
  return entry
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
