-- Record the fingerprints of a batch of requests and push the new ones onto a list queue.
-- KEYS[1] = the queue (list; LPUSH adds, as for a single request)
-- KEYS[2] = the record key of this queue's writes to the fingerprint sets (see _once.lua)
-- KEYS[3..] = the duplicate filter's keys (see open_filter() in _dedup.lua): the sets the
--            fingerprints are recorded in, then, if ARGV[6] is "1", a hash whose field
--            "count" counts the members added; or a Bloom filter's keys (ARGV[6] "bloom")
-- ARGV[1] = the news channel, told when requests were pushed ("" = nobody to tell)
-- ARGV[2] = how: "PUBLISH", or "SPUBLISH" on a Redis Cluster (ARGV[1] is then a sharded
--           channel in the slot of KEYS[1])
-- ARGV[3] = the batch: one msgpack array of triples, in enqueue order: the number of the
--           fingerprint's set (1 = KEYS[3]; 0 = dont_filter: no check, not recorded), its
--           member in that set, the serialized request ("" = not stored here: only record
--           the fingerprint)
-- ARGV[4] = how long the record is kept, in ms
-- ARGV[5] = the write number of this batch
-- ARGV[6] = the filter's mode: "0" (sets), "1" (sets and the count hash), "bloom" or
--           "redisbloom"; with "bloom", ARGV[7] and ARGV[8] are its params and the
--           batch's blocks (see _bloom.lua), with "redisbloom" ARGV[7] its params (see
--           _redisbloom.lua), and a set number in the batch is 1 for a fingerprint, whose
--           member is the fingerprint (for "bloom", as 40 lowercase hex digits); with "expire"
--           (fingerprints that expire: see _expiry.lua) ARGV[7] is the msgpack array of
--           the batch's lifetimes in ms (0: forever) and ARGV[8] the sweep count; the
--           other modes ("lean_expire", "bloom_expire", "redisbloom_expire"): see open_filter() in _dedup.lua
-- returns one character per triple: "1" if the request is new (pushed when it has an
--         entry), "0" if its fingerprint was already recorded (a duplicate: nothing pushed);
--         the same reply to a copy of this call sent again (its reply lost), which does
--         nothing. A Bloom filter may answer for the first triples only (its newest layer
--         filled: the client sends the others again), or "stale" (nothing done: the
--         client reloads the filter's layers and sends again)
--#include _dedup.lua
--#include _once.lua

local before = applied_before(KEYS[2], ARGV[5])
if before then
  return before
end
local filter = open_filter(3, ARGV[6], ARGV[7], ARGV[8])
if not filter then
  return 'stale'
end
local wanted = filter.types
wanted[#wanted + 1] = {KEYS[1], 'list'}
check_types(wanted)
local batch = cmsgpack.unpack(ARGV[3])
local numbers, members, entries = {}, {}, {}
for i = 1, #batch, 3 do
  numbers[#numbers + 1] = batch[i]
  members[#members + 1] = batch[i + 1]
  entries[#entries + 1] = batch[i + 2]
end
local new = filter.find_new(numbers, members)
local pushed = {}
for i, is_new in ipairs(new) do
  if is_new and entries[i] ~= '' then
    pushed[#pushed + 1] = entries[i]
  end
end
call_in_chunks('LPUSH', KEYS[1], pushed)
filter.record()
announce(ARGV[1], ARGV[2], #pushed)
local reply = flags(new)
record_write(KEYS[2], ARGV[5], reply, ARGV[4])
return reply
