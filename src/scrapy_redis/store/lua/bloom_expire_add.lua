-- Check and record a batch of fingerprints in a Bloom filter whose fingerprints expire
-- (see _bloom_expiry.lua), at most once (see _once.lua): one atomic call, so two workers
-- racing on one fingerprint see it new exactly once.
-- KEYS[1] = the record key of this filter's writes (see _once.lua)
-- KEYS[2..] = the filter's generation keys (see bloom_expiry_open())
-- ARGV[1] = how long the record is kept, in ms; ARGV[2] = the write number of this call
-- ARGV[3] = the fingerprints, 40 lowercase hex digits each (msgpack array)
-- ARGV[4] = their lifetimes in ms (msgpack array, 0: the longest)
-- ARGV[5] = the filter's config (msgpack, see bloom_expiry_open())
-- returns one character per fingerprint: "1" if it was new (recorded), "0" if alive already;
--   or "stale" (nothing done: the client's clock estimate is off; it reads the clock again)
--#include _bloom_expiry.lua
--#include _once.lua

local before = applied_before(KEYS[1], ARGV[2])
if before then
  return before
end
local now = server_ms()
local state = bloom_expiry_open(2, cmsgpack.unpack(ARGV[5]), now)
if not state then
  return 'stale'
end
local members, lifetimes = cmsgpack.unpack(ARGV[3]), cmsgpack.unpack(ARGV[4])
local numbers = {}
for i = 1, #members do
  numbers[i] = 1
end
local new = bloom_expiry_find_new(state, numbers, members, lifetimes, now)
local flags = {}
for i = 1, #members do
  flags[i] = new[i] and '1' or '0'
end
local reply = table.concat(flags)
record_write(KEYS[1], ARGV[2], reply, ARGV[1])
return reply
