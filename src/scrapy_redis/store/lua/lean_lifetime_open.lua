-- Open a lean duplicate filter's fingerprints that expire: store the longest lifetime and
-- the generations' size unless the filter has them, and read them back, so that every
-- worker cuts time and generations the same way (expiry layout 3: generations of parts,
-- see _lean_expiry.lua).
-- A filter that had a lifetime before its meta hash said `expiry_layout` 2 or 3 (written
-- by an older scrapy-redis, which did not say when its own buckets held fingerprints kept
-- forever) is marked `forever`: its own buckets are always asked. One whose generations
-- were of an earlier layout (1 or 2: one part, as many buckets as the filter) is moved
-- to layout 3: those generations are not read any more (they expire on their own), and
-- the reply says so.
-- KEYS[1] = the filter's meta hash
-- ARGV[1] = this worker's longest lifetime in ms
-- ARGV[2] = buckets of a generation's part; ARGV[3] = a part's capacity (fingerprints)
-- returns {the stored longest lifetime in ms, 1 if the own buckets may hold members (the
--   meta hash counts some, or says `forever`), else 0, the stored buckets of a part, the
--   stored capacity of a part, 1 if generations of an earlier layout were left, else 0}

local earlier = 0
if redis.call('HSETNX', KEYS[1], 'lifetime_ms', ARGV[1]) == 0 then
  local layout = redis.call('HGET', KEYS[1], 'expiry_layout')
  if not layout then
    redis.call('HSET', KEYS[1], 'forever', 1)
  end
  if layout ~= '3' then
    earlier = 1
    redis.call('HDEL', KEYS[1], 'gen_buckets', 'gen_part')
  end
end
redis.call('HSET', KEYS[1], 'expiry_layout', 3)
redis.call('HSETNX', KEYS[1], 'gen_buckets', ARGV[2])
redis.call('HSETNX', KEYS[1], 'gen_part', ARGV[3])
local stored = redis.call('HMGET', KEYS[1], 'lifetime_ms', 'count', 'forever', 'gen_buckets',
  'gen_part')
local own = (tonumber(stored[2]) or 0) > 0 or stored[3] == '1'
return {stored[1], own and 1 or 0, stored[4], stored[5], earlier}
