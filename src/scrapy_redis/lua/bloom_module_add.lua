-- Check and record a batch of fingerprints in a RedisBloom filter (BF.INSERT creates it,
-- scaling, with the given capacity and error rate), at most once (see _once.lua).
-- KEYS[1] = the RedisBloom filter (the filter's key)
-- KEYS[2] = the record key of this filter's writes to KEYS[1]
-- ARGV[1] = how long the record is kept, in ms; ARGV[2] = the write number of this call
-- ARGV[3] = capacity, ARGV[4] = error rate, ARGV[5] = expansion; ARGV[6..] = fingerprints
-- returns a string with one '1' (new) or '0' (seen) per fingerprint
--#include _once.lua

local before = applied_before(KEYS[2], ARGV[2])
if before then
  return before
end
local added = redis.call('BF.INSERT', KEYS[1], 'CAPACITY', ARGV[3], 'ERROR', ARGV[4],
  'EXPANSION', ARGV[5], 'ITEMS', unpack(ARGV, 6))
local flags = {}
for i, value in ipairs(added) do flags[i] = (value == 1) and '1' or '0' end
flags = table.concat(flags)
record_write(KEYS[2], ARGV[2], flags, ARGV[1])
return flags
