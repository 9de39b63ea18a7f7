-- Record the fingerprints of a batch of requests and push the new ones onto a PriorityQueue.
-- KEYS[1] = the queue's index: sorted set, member = priority as text, score = -priority
-- KEYS[2] = the record key of this queue's writes to the fingerprint sets (see _once.lua)
-- KEYS[3..k+2] = the lists of the priorities of the batch, one per priority
-- KEYS[k+3..] = the duplicate filter's keys (see open_filter() in _dedup.lua): the sets
--               the fingerprints are recorded in, then, if ARGV[k+7] is "1", a hash whose
--               field "count" counts the members added; or a Bloom filter's keys
-- ARGV[1] = the news channel, told when requests were pushed ("" = nobody to tell)
-- ARGV[2] = how: "PUBLISH", or "SPUBLISH" on a Redis Cluster (ARGV[1] is then a sharded
--           channel in the slot of KEYS[1])
-- ARGV[3] = how many priority lists follow KEYS[2] (k)
-- ARGV[4..k+3] = the priority of each of those lists (integers, as text), same order
-- ARGV[k+4] = the batch: one msgpack array of quadruples, in enqueue order: the number of
--             the fingerprint's set (1 = KEYS[k+3]; 0 = dont_filter: no check, not
--             recorded), its member in that set, the number of the request's priority
--             list (1..k), the serialized request ("" = not stored here: only record the
--             fingerprint)
-- ARGV[k+5] = how long the record is kept, in ms
-- ARGV[k+6] = the write number of this batch
-- ARGV[k+7] = the filter's mode: "0" (sets), "1" (sets and the count hash), "bloom" or
--             "redisbloom"; with "bloom", ARGV[k+8] and ARGV[k+9] are its params and
--             the batch's blocks (see _bloom.lua), with "redisbloom" ARGV[k+8] its
--             params (see _redisbloom.lua), and a set number in the batch is 1 for a
--             fingerprint, whose member is the fingerprint (for "bloom", as 40
--             lowercase hex digits); with "expire" (fingerprints that expire:
--             see _expiry.lua) ARGV[k+8] is the msgpack array of the batch's lifetimes
--             in ms (0: forever) and ARGV[k+9] the sweep count; the other modes
--             ("lean_expire", "bloom_expire", "redisbloom_expire"): see open_filter() in _dedup.lua
-- returns one character per quadruple: "1" if the request is new (appended to its
--         priority list when it has an entry), "0" if its fingerprint was already
--         recorded; the same reply to a copy of this call sent again (its reply lost),
--         which does nothing. A Bloom filter may answer for the first quadruples only,
--         or "stale" (see dedup_push_list.lua)
--#include _dedup.lua
--#include _once.lua

local lists = tonumber(ARGV[3])
local before = applied_before(KEYS[2], ARGV[lists + 6])
if before then
  return before
end
local filter = open_filter(lists + 3, ARGV[lists + 7], ARGV[lists + 8], ARGV[lists + 9])
if not filter then
  return 'stale'
end
local wanted = filter.types
wanted[#wanted + 1] = {KEYS[1], 'zset'}
for i = 3, lists + 2 do
  wanted[#wanted + 1] = {KEYS[i], 'list'}
end
check_types(wanted)
local batch = cmsgpack.unpack(ARGV[lists + 4])
local numbers, members, list_numbers, entries = {}, {}, {}, {}
for i = 1, #batch, 4 do
  numbers[#numbers + 1] = batch[i]
  members[#members + 1] = batch[i + 1]
  list_numbers[#list_numbers + 1] = batch[i + 2]
  entries[#entries + 1] = batch[i + 3]
end
local new = filter.find_new(numbers, members)
local pushed, count = {}, 0
for i, is_new in ipairs(new) do
  if is_new and entries[i] ~= '' then
    local list = list_numbers[i]
    pushed[list] = pushed[list] or {}
    table.insert(pushed[list], entries[i])
    count = count + 1
  end
end
for list, group in pairs(pushed) do
  call_in_chunks('RPUSH', KEYS[list + 2], group)
  local priority = ARGV[list + 3]
  redis.call('ZADD', KEYS[1], -tonumber(priority), priority)
end
filter.record()
announce(ARGV[1], ARGV[2], count)
local reply = flags(new)
record_write(KEYS[2], ARGV[lists + 6], reply, ARGV[lists + 5])
return reply
