-- Put queue entries set aside as invalid back in the queue (at the end popped next), once
-- they can be decoded (SCHEDULER_SERIALIZER fixed, the spider's callbacks back...). An
-- entry is put back only if this call removed it from the invalid list: two requeues at
-- once put each entry back once.
-- KEYS[1] = the invalid entries list (<queue key>:invalid)
-- KEYS[2] = the queue key (a list queue; a priority queue's index)
-- KEYS[3..n] = a priority queue's lists, one per priority the entries have
-- ARGV[1] = how they go back: "rpush" (FifoQueue), "lpush" (LifoQueue) or "prio"
-- ARGV[2..n] = triples (number of the entry's list in KEYS, from 3; its priority; entry)
-- returns how many entries were put back
--#include _leases.lua

local op = ARGV[1]
local moved = 0
for i = 2, #ARGV, 3 do
  local list, priority, entry = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2]
  if redis.call('LREM', KEYS[1], 1, entry) == 1 then
    if op == 'prio' then
      put_back(op, KEYS[list], KEYS[2], priority, {entry})
    else
      put_back(op, KEYS[2], '', '', {entry})
    end
    moved = moved + 1
  end
end
return moved
