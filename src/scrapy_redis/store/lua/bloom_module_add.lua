-- Check and record a batch of fingerprints in a RedisBloom filter (BF.INSERT creates it,
-- scaling, with the given capacity and error rate), at most once (see _once.lua).
-- KEYS[1] = the RedisBloom filter (the filter's key)
-- KEYS[2] = the record key of this filter's writes to KEYS[1]
-- ARGV[1] = how long the record is kept, in ms; ARGV[2] = the write number of this call
-- ARGV[3] = the filter's params (see _redisbloom.lua); ARGV[4..] = fingerprints
-- returns {flags, info}: flags, a string with one '1' (new) or '0' (seen) per
--         fingerprint (the first call's, for a copy of it sent again); info, the
--         filter's BF.INFO (name, value, ...) after the call
--#include _once.lua
--#include _redisbloom.lua

local flags = applied_before(KEYS[2], ARGV[2])
if not flags then
  local new = redisbloom_insert(KEYS[1], cmsgpack.unpack(ARGV[3]), {unpack(ARGV, 4)})
  local chars = {}
  for i, is_new in ipairs(new) do chars[i] = is_new and '1' or '0' end
  flags = table.concat(chars)
  record_write(KEYS[2], ARGV[2], flags, ARGV[1])
end
local info = {}
if redis.call('EXISTS', KEYS[1]) == 1 then
  info = redis.call('BF.INFO', KEYS[1])
end
return {flags, info}
