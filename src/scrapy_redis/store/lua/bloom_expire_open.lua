-- Make a Bloom filter whose fingerprints expire if its key does not exist; return what
-- workers agree on (see scrapy_redis/dupefilters/bloom_expiry.py).
-- KEYS[1] = the filter's key: its meta hash (format, lifetime, the generations' layout)
-- ARGV = field, value, field, value...: the meta hash of a new filter
-- returns {'wrongtype', type} if KEYS[1] is not a hash, else {made (1: now, 0: before),
-- the meta hash as a flat field, value... list}
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
  return {'wrongtype', kind}
end
local made = 0
if kind == 'none' then
  redis.call('HSET', KEYS[1], unpack(ARGV))
  made = 1
end
return {made, redis.call('HGETALL', KEYS[1])}
