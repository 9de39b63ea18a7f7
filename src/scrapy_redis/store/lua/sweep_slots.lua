-- Look over the per-slot queues for queued requests that no pop would reach
-- (scrapy_redis.politeness; keys and members: see _slots.lua, "Bad values"): a member of
-- pq that names no slot (no NUL) is set aside into KEYS[5], as the undecodable entries
-- a worker sets aside are; a slot with requests that is in none of its places (its state
-- says idle, or names a place it is not in) is placed again. Each is counted as a bad
-- value. A worker that found nothing to take and no slot waiting calls it, a chunk of
-- pq at a time, one ZRANGEBYLEX per slot (a slot's other entries are skipped).
-- KEYS[1..4] = the queued requests (<queue key>:polite:pq), ready, waiting, slots
-- KEYS[5] = the queue's undecodable entries (a list, <queue key>:invalid)
-- ARGV[1] = where to go on from: "-" first, else the cursor returned before
-- ARGV[2] = how many entries of pq to look at, at most
-- returns {cursor ("" once pq is all looked at), how many were set aside or placed}
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

local now = now_ms()
local cursor, budget, fixed = ARGV[1], tonumber(ARGV[2]), 0
while budget > 0 do
  local entry = redis.call('ZRANGEBYLEX', k.pq, cursor, '+', 'LIMIT', 0, 1)[1]
  if not entry then
    return {'', fixed}
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
