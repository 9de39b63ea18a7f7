-- Included (scrapy_redis.store.scripts) by the scripts that check and record fingerprints in a
-- RedisBloom filter (BLOOMFILTER_BACKEND, see scrapy_redis/dupefilters/bloom.py): not a
-- script. `params`, a msgpack array: {capacity, error rate, expansion}: how BF.INSERT
-- makes the filter (scaling) if it does not exist yet; RedisBloom keeps its own sizes.

-- Check and record `fingerprints` (a list) in the RedisBloom filter `key`: whether each
-- is new, in order (a fingerprint the list held before is seen). BF.INSERT takes them
-- 1000 at a time (unpack's stack limit); it writes nothing if it fails (a key of another
-- type), and a call that wrote is not refused later writes (Redis checks memory before a
-- script's first write only).
local function redisbloom_insert(key, params, fingerprints)
  local new = {}
  for i = 1, #fingerprints, 1000 do
    local added = redis.call('BF.INSERT', key, 'CAPACITY', params[1], 'ERROR', params[2],
      'EXPANSION', params[3], 'ITEMS', unpack(fingerprints, i, math.min(i + 999, #fingerprints)))
    for _, value in ipairs(added) do new[#new + 1] = value == 1 end
  end
  return new
end
