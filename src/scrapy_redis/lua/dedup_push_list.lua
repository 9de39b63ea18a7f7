-- Record the fingerprints of a batch of requests and push the new ones onto a list queue.
-- KEYS[1] = the dupefilter set of fingerprints
-- KEYS[2] = the queue (list; LPUSH adds, as for a single request)
-- ARGV[1] = the news channel, told when requests were pushed ("" = nobody to tell)
-- ARGV[2] = the batch: one msgpack array of pairs, in enqueue order: fingerprint ("" =
--           dont_filter: no check, not recorded), serialized request ("" = not stored
--           here: only record the fingerprint)
-- returns one character per pair: "1" if the request is new (pushed when it has an
--         entry), "0" if its fingerprint was already recorded (a duplicate: nothing pushed)
--#include _dedup.lua

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
return flags(new)
