-- Record one request fingerprint in a duplicate filter's set, at most once: a copy of
-- this call sent again (its reply was lost) must not find the fingerprint its first run
-- added and take a new request for a duplicate.
-- KEYS[1] = the fingerprint set
-- KEYS[2] = the record key of this filter's writes to KEYS[1] (see _once.lua)
-- ARGV[1] = the fingerprint
-- ARGV[2] = how long the record is kept, in ms
-- ARGV[3] = the write number of this call
-- returns 1 if the fingerprint was added (a new request), 0 if it was there already
--#include _once.lua

local before = applied_before(KEYS[2], ARGV[3])
if before then
  return tonumber(before)
end
local added = redis.call('SADD', KEYS[1], ARGV[1])
record_write(KEYS[2], ARGV[3], tostring(added), ARGV[2])
return added
