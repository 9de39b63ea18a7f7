-- Look over the per-slot queues for queued requests that no pop would reach
-- (scrapy_redis.politeness; keys and members: see _slots.lua, "Bad values" and
-- _slot_store.lua): a member of pq that names no slot (no NUL) is set aside into KEYS[5],
-- as the undecodable entries a worker sets aside are; a slot with requests that is in
-- none of its places (its state says idle, or names a place it is not in) is placed
-- again; then, over the lists' index, a list whose pointer is not in pq gets it back,
-- an index entry whose list is gone goes, and an empty queue's count of listed
-- requests goes. Each is counted as a bad value. A worker that found nothing to take
-- and no slot waiting calls it, a chunk at a time: one ZRANGEBYLEX per slot of pq (a
-- slot's other entries are skipped), then per chunk of the index.
-- KEYS[1..4] = the queued requests (<queue key>:polite:pq), ready, waiting, slots
-- KEYS[5] = the queue's undecodable entries (a list, <queue key>:invalid)
-- ARGV[1] = where to go on from: "-" first, else the cursor returned before (in pq, or
--           "L<cursor>" in the lists' index)
-- ARGV[2] = how many slots of pq (or groups of the index) to look at, at most
-- returns {cursor ("" once all is looked over), how many were set aside or fixed}
--#include _slots.lua

local k = slot_keys(KEYS[1])

-- Whether `slot` (with requests queued) is where its state says: ready under its ready
-- member, waiting, or full (at its concurrency); if not, it is placed again.
local function place_lost(slot, now)
  local st = load_slot(k, slot)
  if (st[6] == 'r' and redis.call('ZSCORE', k.ready, st[7]))
    or (st[6] == 'w' and redis.call('ZSCORE', k.waiting, slot))
    or (st[6] == 'f' and st[4] > 0 and st[2] >= st[4]) then
    return 0
  end
  place(k, slot, st, now)
  save_slot(k, slot, st)
  if st[6] == 'i' then
    return 0 -- (no request after all)
  end
  note_corrupt(k, 'unplaced')
  return 1
end

-- The lists' index from `cursor`: a group whose pointer is not in pq gets it back (its
-- list's requests were out of every pop's reach; its slot is placed), one whose list is
-- gone leaves the index. Once all is looked over, an empty queue's count of listed
-- requests goes. The cursor to go on from, how many were fixed.
local function sweep_lists(cursor, budget, now)
  local fixed = 0
  local groups = redis.call('ZRANGEBYLEX', k.lists, cursor, '+', 'LIMIT', 0, budget)
  for _, group in ipairs(groups) do
    cursor = '(' .. group
    if not redis.call('ZSCORE', k.pq, group) then
      fixed = fixed + 1
      if redis.call('EXISTS', list_key(k, group)) == 1 then
        redis.call('ZADD', k.pq, 0, group)
        note_corrupt(k, 'unlisted')
        place_lost(slot_of(group), now)
      else
        redis.call('ZREM', k.lists, group)
        note_corrupt(k, 'list')
      end
    end
  end
  if #groups == budget then
    return 'L' .. cursor, fixed
  end
  if redis.call('ZCARD', k.pq) == 0 and redis.call('DEL', k.more) == 1 then
    note_corrupt(k, 'more')
    fixed = fixed + 1
  end
  return '', fixed
end

local now = now_ms()
local cursor, budget, fixed = ARGV[1], tonumber(ARGV[2]), 0
if string.sub(cursor, 1, 1) == 'L' then -- (the lists' index, after pq)
  local next_cursor, n = sweep_lists(string.sub(cursor, 2), budget, now)
  return {next_cursor, n}
end
while budget > 0 do
  local entry = redis.call('ZRANGEBYLEX', k.pq, cursor, '+', 'LIMIT', 0, 1)[1]
  if not entry then
    return {'L-', fixed}
  end
  budget = budget - 1
  local zero = string.find(entry, '\0', 1, true)
  if zero then
    local slot = string.sub(entry, 1, zero - 1)
    fixed = fixed + place_lost(slot, now)
    cursor = '[' .. slot .. '\1'
  else
    redis.call('ZREM', k.pq, entry)
    redis.call('RPUSH', KEYS[5], entry)
    note_corrupt(k, 'member')
    fixed = fixed + 1
    cursor = '(' .. entry
  end
end
return {cursor, fixed}
