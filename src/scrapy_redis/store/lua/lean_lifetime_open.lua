-- Open a lean duplicate filter's fingerprints that expire: store the longest lifetime
-- unless the filter has one, and read it back, so that every worker cuts time the same way.
-- A filter that had a lifetime before its meta hash said `expiry_layout` 2 (written by an
-- older scrapy-redis, which did not say when its own buckets held fingerprints kept
-- forever) is marked `forever`: its own buckets are always asked (see _lean_expiry.lua).
-- KEYS[1] = the filter's meta hash
-- ARGV[1] = this worker's longest lifetime in ms
-- returns {the stored longest lifetime in ms, 1 if the own buckets may hold members (the
--   meta hash counts some, or says `forever`), else 0}

if redis.call('HSETNX', KEYS[1], 'lifetime_ms', ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], 'expiry_layout', 2)
elseif redis.call('HSETNX', KEYS[1], 'expiry_layout', 2) == 1 then
  redis.call('HSET', KEYS[1], 'forever', 1)
end
local stored = redis.call('HMGET', KEYS[1], 'lifetime_ms', 'count', 'forever')
local own = (tonumber(stored[2]) or 0) > 0 or stored[3] == '1'
return {stored[1], own and 1 or 0}
