-- Open a lean duplicate filter: store its layout unless it has one, and read it back,
-- so that every worker uses the layout of the data whatever its own settings.
-- KEYS[1] = the filter's meta hash (see scrapy_redis/dupefilters/lean_layout.py)
-- ARGV[1] = the layout version
-- ARGV[2] = bucket bits
-- ARGV[3] = member bits
-- ARGV[4] = the capacity the layout is sized for
-- returns the stored {version, bucket bits, member bits, capacity, count} (count may be nil)

if redis.call('HEXISTS', KEYS[1], 'version') == 0 then
  redis.call('HSET', KEYS[1], 'version', ARGV[1], 'bucket_bits', ARGV[2],
    'member_bits', ARGV[3], 'capacity', ARGV[4])
end
return redis.call('HMGET', KEYS[1], 'version', 'bucket_bits', 'member_bits', 'capacity', 'count')
