-- Move requests that are due (see due_add.lua) into the per-slot queues (fleet-wide limits,
-- scrapy_redis.politeness), each at most once: a member not there any more (another
-- worker moved it) or not due yet is left alone. They join their slot's queue as new
-- requests do (push_slots.lua), so that the slot's limits hold for them.
-- KEYS[1] = the requests due later (sorted set)
-- KEYS[2..6] = the per-slot queues' keys (pq, ready, waiting, slots, seq: _slots.lua)
-- ARGV[1] = the news channel, told when requests were moved ("" = nobody to tell)
-- ARGV[2] = how: "PUBLISH", or "SPUBLISH" on a Redis Cluster
-- ARGV[3] = msgpack map slot -> {delay ms, concurrency, jitter}: the slots' limits
-- ARGV[4], ARGV[5], ... = pairs: a member (msgpack {priority, a random number, the
--           serialized request[, its slot]}), its download slot
-- returns how many requests were moved
--#include _slots.lua

local now = now_ms()
local entries = {}
for i = 4, #ARGV, 2 do
  local member = ARGV[i]
  local due = redis.call('ZSCORE', KEYS[1], member)
  if due and tonumber(due) <= now then
    local request = cmsgpack.unpack(member)
    entries[#entries + 1] = {ARGV[i + 1], request[1], request[3]}
    redis.call('ZREM', KEYS[1], member)
  end
end
push_new_slots(slot_keys(KEYS[2]), cmsgpack.unpack(ARGV[3]), entries)
if #entries > 0 and ARGV[1] ~= '' then
  redis.pcall(ARGV[2], ARGV[1], #entries)
end
return #entries
