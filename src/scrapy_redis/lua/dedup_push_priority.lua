-- Record the fingerprints of a batch of requests and push the new ones onto a PriorityQueue.
-- KEYS[1] = the dupefilter set of fingerprints
-- KEYS[2] = the queue's index: sorted set, member = priority as text, score = -priority
-- KEYS[3] = the record key of this queue's writes to KEYS[1] (see _once.lua)
-- KEYS[4..] = the lists of the priorities of the batch, one per priority
-- ARGV[1] = the news channel, told when requests were pushed ("" = nobody to tell)
-- ARGV[2] = how many priority lists follow KEYS[3] (k)
-- ARGV[3..k+2] = the priority of each of those lists (integers, as text), same order
-- ARGV[k+3] = the batch: one msgpack array of triples, in enqueue order: fingerprint ("" =
--             dont_filter: no check, not recorded), number of the request's priority list
--             (1..k), serialized request ("" = not stored here: only record the fingerprint)
-- ARGV[k+4] = how long the record is kept, in ms
-- ARGV[k+5] = the write number of this batch
-- returns one character per triple: "1" if the request is new (appended to its priority
--         list when it has an entry), "0" if its fingerprint was already recorded; the
--         same reply to a copy of this call sent again (its reply lost), which does nothing
--#include _dedup.lua
--#include _once.lua

local lists = tonumber(ARGV[2])
local before = applied_before(KEYS[3], ARGV[lists + 5])
if before then
  return before
end
local wanted = {{KEYS[1], 'set'}, {KEYS[2], 'zset'}}
for i = 4, lists + 3 do
  wanted[#wanted + 1] = {KEYS[i], 'list'}
end
check_types(wanted)
local batch = cmsgpack.unpack(ARGV[lists + 3])
local fingerprints, numbers, entries = {}, {}, {}
for i = 1, #batch, 3 do
  fingerprints[#fingerprints + 1] = batch[i]
  numbers[#numbers + 1] = batch[i + 1]
  entries[#entries + 1] = batch[i + 2]
end
local new, added = find_new(KEYS[1], fingerprints)
local pushed, count = {}, 0
for i, is_new in ipairs(new) do
  if is_new and entries[i] ~= '' then
    local list = numbers[i]
    pushed[list] = pushed[list] or {}
    table.insert(pushed[list], entries[i])
    count = count + 1
  end
end
for list, group in pairs(pushed) do
  call_in_chunks('RPUSH', KEYS[list + 3], group)
  local priority = ARGV[list + 2]
  redis.call('ZADD', KEYS[2], -tonumber(priority), priority)
end
record_new(KEYS[1], added)
announce(ARGV[1], count)
local reply = flags(new)
record_write(KEYS[3], ARGV[lists + 5], reply, ARGV[lists + 4])
return reply
