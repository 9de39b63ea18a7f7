-- Create a Bloom filter's meta hash if it does not exist; return it (what workers agree on).
-- KEYS[1] = the filter's meta hash (see scrapy_redis/keys.py: bloom_meta_key)
-- ARGV    = field, value, field, value...: the layout (version, hash, capacity, error_rate,
--           expansion, tightening, layer:0) of a new filter
-- returns the meta hash as a flat field, value... list (HGETALL)
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'layers', 1, 'count', 0, 'count:0', 0, unpack(ARGV))
end
return redis.call('HGETALL', KEYS[1])
