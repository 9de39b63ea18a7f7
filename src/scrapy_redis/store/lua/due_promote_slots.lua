-- Move requests that are due (see due_add.lua) into the per-slot queues (fleet-wide limits,
-- scrapy_redis.politeness), each at most once: a member not there any more (another
-- worker moved it) or not due yet is left alone; one that is no request due later
-- (_due.lua) is set aside into KEYS[7], not moved. They join their slot's queue as new
-- requests do (push_slots.lua), so that the slot's limits hold for them.
-- KEYS[1] = the requests due later (sorted set)
-- KEYS[2..6] = the per-slot queues' keys (pq, ready, waiting, slots, seq: _slots.lua)
-- KEYS[7] = the queue's entries set aside as undecodable (a list, <queue key>:invalid)
-- ARGV[1] = the news channel, told when requests were moved ("" = nobody to tell)
-- ARGV[2] = how: "PUBLISH", or "SPUBLISH" on a Redis Cluster
-- ARGV[3] = msgpack map slot -> {delay ms, concurrency, jitter}: the slots' limits
-- ARGV[4], ARGV[5], ... = pairs: a member (msgpack {priority, a random number, the
--           serialized request[, its slot]}), its download slot
-- returns how many requests were moved
--#include _slots.lua
--#include _due.lua

local entries = {}
for _, entry in ipairs(read_due(KEYS[1], KEYS[7], 4, 2, now_ms())) do
  local request = entry[2]
  entries[#entries + 1] = {ARGV[entry[3] + 1], request[1], request[3]}
  redis.call('ZREM', KEYS[1], entry[1])
end
push_new_slots(slot_keys(KEYS[2]), cmsgpack.unpack(ARGV[3]), entries)
if #entries > 0 and ARGV[1] ~= '' then
  redis.pcall(ARGV[2], ARGV[1], #entries)
end
return #entries
