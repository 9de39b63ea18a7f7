-- Push requests onto the per-slot queues (scrapy_redis.politeness), at most once: new
-- ones (without a duplicate check), or leased ones put back.
-- KEYS[1] = the queued requests (<queue key>:polite:pq); the other keys of _slots.lua
--           (ready, waiting, slots, seq) are derived from it, and follow as KEYS[2..5]
-- KEYS[6] = the record key of this queue's writes (see _once.lua)
-- ARGV[1] = "new": ARGV[5] is a msgpack array of triples (slot, priority, request);
--           "back": ARGV[5] is a msgpack array of members popped before (see _slots.lua)
-- ARGV[2] = how long the record is kept, in ms
-- ARGV[3] = the write number of this call
-- ARGV[4] = msgpack map slot -> {delay ms, concurrency, jitter}: the slots' limits
-- ARGV[5] = the batch
-- returns how many requests were pushed (the recorded count for a copy of this call
-- sent again after its reply was lost: it pushes nothing)
--#include _chunks.lua
--#include _once.lua
--#include _slots.lua

local before = applied_before(KEYS[6], ARGV[3])
if before then
  return tonumber(before)
end
local k = slot_keys(KEYS[1])
local batch = cmsgpack.unpack(ARGV[5])
local n
if ARGV[1] == 'back' then
  for slot, c in pairs(cmsgpack.unpack(ARGV[4])) do -- the limits of slots new here (a move)
    local st = load_slot(k, slot)
    set_limits(st, c)
    save_slot(k, slot, st)
  end
  put_back_slots(KEYS[1], batch)
  n = #batch
else
  local entries = {}
  for i = 1, #batch, 3 do
    entries[#entries + 1] = {batch[i], batch[i + 1], batch[i + 2]}
  end
  push_new_slots(k, cmsgpack.unpack(ARGV[4]), entries)
  n = #entries
end
record_write(KEYS[6], ARGV[3], tostring(n), ARGV[2])
return n
