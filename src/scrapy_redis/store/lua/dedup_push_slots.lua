-- Record the fingerprints of a batch of requests and push the new ones onto the
-- per-slot queues (scrapy_redis.politeness; keys and members: see _slots.lua and
-- _slot_store.lua).
-- KEYS[1..5] = the queued requests (<queue key>:polite:pq), ready, waiting, slots, seq
-- KEYS[6] = the record key of this queue's writes to the fingerprint sets (see _once.lua)
-- KEYS[7..] = the duplicate filter's keys (see open_filter() in _dedup.lua)
-- ARGV[1] = the news channel, told when requests were pushed ("" = nobody to tell)
-- ARGV[2] = how: "PUBLISH" or "SPUBLISH" (see dedup_push_priority.lua)
-- ARGV[3] = the batch: one msgpack array of quintuples, in enqueue order: the number of
--           the fingerprint's set (1 = KEYS[7]; 0 = dont_filter), its member in that set,
--           the request's download slot, its priority, the serialized request ("" = only
--           record the fingerprint)
-- ARGV[4] = msgpack map slot -> {delay ms, concurrency (0: no cap), jitter}
-- ARGV[5] = how long the record is kept, in ms
-- ARGV[6] = the write number of this batch
-- ARGV[7..] = the filter's mode and params (see dedup_push_priority.lua)
-- returns one character per quintuple: "1" new, "0" duplicate (see dedup_push_priority.lua)
--#include _dedup.lua
--#include _once.lua
--#include _slots.lua

local before = applied_before(KEYS[6], ARGV[6])
if before then
  return before
end
local filter = open_filter(7, ARGV[7], ARGV[8], ARGV[9])
if not filter then
  return 'stale'
end
local wanted = filter.types
local kinds = {'zset', 'zset', 'zset', 'hash'} -- (seq and more: a bad value is replaced)
for i = 1, 4 do
  wanted[#wanted + 1] = {KEYS[i], kinds[i]}
end
local k = slot_keys(KEYS[1])
wanted[#wanted + 1] = {k.lists, 'zset'}
check_types(wanted)
local batch = cmsgpack.unpack(ARGV[3])
local numbers, members, entries = {}, {}, {}
for i = 1, #batch, 5 do
  numbers[#numbers + 1] = batch[i]
  members[#members + 1] = batch[i + 1]
  entries[#entries + 1] = {batch[i + 2], batch[i + 3], batch[i + 4]}
end
local new = filter.find_new(numbers, members)
local pushed = {}
for i, is_new in ipairs(new) do
  if is_new and entries[i][3] ~= '' then
    pushed[#pushed + 1] = entries[i]
  end
end
push_new_slots(k, cmsgpack.unpack(ARGV[4]), pushed)
filter.record()
announce(ARGV[1], ARGV[2], #pushed)
local reply = flags(new)
record_write(KEYS[6], ARGV[6], reply, ARGV[5])
return reply
