-- Put queue entries set aside as invalid back in the queue (at the end popped next), once
-- they can be decoded (SCHEDULER_SERIALIZER fixed, the spider's callbacks back...). An
-- entry is put back only if it is still at the position the caller read it from: two
-- requeues at once put each entry back once. The entries put back are replaced by a
-- tombstone, then removed by one LREM (one pass over the list per call, not per entry).
-- KEYS[1] = the invalid entries list (<queue key>:invalid, <first start key>:invalid)
-- KEYS[2] = the queue key (a list queue; a priority queue's index), or the start key
-- KEYS[3..n] = a priority queue's lists, one per priority the entries have
-- ARGV[1] = how they go back: "rpush" (FifoQueue), "lpush" (LifoQueue) or "prio"; for
--           start messages set aside: "rpush" (a list), "sadd" (a set), "zadd" (a sorted set)
-- ARGV[2] = the tombstone: a value no entry has (unique to this call)
-- ARGV[3..n] = quadruples (the entry's position in KEYS[1]; number of its list in KEYS,
--              from 3; its priority, or its score for "zadd"; the entry)
-- returns how many entries were put back
--#include _leases.lua

local op, tombstone = ARGV[1], ARGV[2]
local moved = 0
for i = 3, #ARGV, 4 do
  local position, list = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  local priority, entry = ARGV[i + 2], ARGV[i + 3]
  if redis.call('LINDEX', KEYS[1], position) == entry then
    redis.call('LSET', KEYS[1], position, tombstone)
    if op == 'prio' then
      put_back(op, KEYS[list], KEYS[2], priority, {entry})
    else
      put_back(op, KEYS[2], '', priority, {entry})
    end
    moved = moved + 1
  end
end
if moved > 0 then
  redis.call('LREM', KEYS[1], 0, tombstone)
end
return moved
