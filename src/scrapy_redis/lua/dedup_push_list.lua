-- Record the fingerprints of a batch of requests and push the new ones onto a list queue.
-- KEYS[1] = the dupefilter set of fingerprints
-- KEYS[2] = the queue (list; LPUSH adds, as for a single request)
-- KEYS[3] = the record key of this queue's writes to KEYS[1] (see _once.lua)
-- ARGV[1] = the news channel, told when requests were pushed ("" = nobody to tell)
-- ARGV[2] = the batch: one msgpack array of pairs, in enqueue order: fingerprint ("" =
--           dont_filter: no check, not recorded), serialized request ("" = not stored
--           here: only record the fingerprint)
-- ARGV[3] = how long the record is kept, in ms
-- ARGV[4] = the write number of this batch
-- returns one character per pair: "1" if the request is new (pushed when it has an
--         entry), "0" if its fingerprint was already recorded (a duplicate: nothing pushed);
--         the same reply to a copy of this call sent again (its reply lost), which does
--         nothing
--#include _dedup.lua
--#include _once.lua

local before = applied_before(KEYS[3], ARGV[4])
if before then
  return before
end
check_types({{KEYS[1], 'set'}, {KEYS[2], 'list'}})
local batch = cmsgpack.unpack(ARGV[2])
local fingerprints, entries = {}, {}
for i = 1, #batch, 2 do
  fingerprints[#fingerprints + 1] = batch[i]
  entries[#entries + 1] = batch[i + 1]
end
local new, added = find_new(KEYS[1], fingerprints)
local pushed = {}
for i, is_new in ipairs(new) do
  if is_new and entries[i] ~= '' then
    pushed[#pushed + 1] = entries[i]
  end
end
call_in_chunks('LPUSH', KEYS[2], pushed)
record_new(KEYS[1], added)
announce(ARGV[1], #pushed)
local reply = flags(new)
record_write(KEYS[3], ARGV[4], reply, ARGV[3])
return reply
