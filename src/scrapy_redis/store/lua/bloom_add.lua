-- Check and record a batch of fingerprints in a layered, blocked Bloom filter (see
-- _bloom.lua), at most once (see _once.lua). A batch is one atomic call, so two workers
-- racing on one fingerprint see it new exactly once.
-- KEYS[1] = the record key of this filter's writes (see _once.lua)
-- KEYS[2..] = the filter's keys: its meta hash, the hash listing its block groups, then
--             the block keys the batch touches
-- ARGV[1] = how long the record is kept, in ms; ARGV[2] = the write number of this call
-- ARGV[3] = the filter's params, ARGV[4] = the blocks of the batch (see _bloom.lua)
-- ARGV[5..] = the fingerprints of the batch, 40 lowercase hex digits each
-- Only the first fingerprints, as many as the newest layer has room for, are recorded (the
-- flags say how many): the client sends the others again, to the layer added for them.
-- returns {flags, layers, count}: flags a string with one '1' (new) or '0' (seen) per
-- fingerprint, layers the layer count after the call, count the fingerprints recorded in
-- all; {'stale', layers, '0'} (nothing done) if the client's layers or generation are
-- not the filter's
--#include _bloom.lua
--#include _once.lua

local fkeys = keys_from(2)
local meta = fkeys[1]
local before = applied_before(KEYS[1], ARGV[2])
if before then
  return {before, redis.call('HGET', meta, 'layers'), redis.call('HGET', meta, 'count')}
end
local state = bloom_state(fkeys, cmsgpack.unpack(ARGV[3]), cmsgpack.unpack(ARGV[4]))
if not state then
  return {'stale', redis.call('HGET', meta, 'layers') or '0', '0'}
end
local fingerprints = {}
for i = 5, math.min(#ARGV, 4 + state.room) do fingerprints[#fingerprints + 1] = ARGV[i] end
local new, found = bloom_find_new(state, fingerprints)
local flags = {}
for i, is_new in ipairs(new) do flags[i] = is_new and '1' or '0' end
flags = table.concat(flags)
local layers, count = bloom_record(state, found)
record_write(KEYS[1], ARGV[2], flags, ARGV[1])
return {flags, tostring(layers), tostring(count)}
