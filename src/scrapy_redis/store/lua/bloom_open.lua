-- Make a Bloom filter if its key does not exist; return what workers agree on.
-- KEYS[1] = the filter's key: its meta hash (layout, generation, layers, counts)
-- KEYS[2] = the hash listing its block groups (see scrapy_redis/store/keys.py: bloom_blocks_key)
-- ARGV[1..#ARGV-1] = field, value, field, value...: the layout of a new filter
-- ARGV[#ARGV] = the block count of its first layer
-- returns {'wrongtype', type} if KEYS[1] is not a hash, else {made (1: now, 0: before),
-- the meta hash as a flat field, value... list}
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
  return {'wrongtype', kind}
end
local made = 0
if kind == 'none' then
  local generation = redis.call('HINCRBY', KEYS[2], 'generation', 1)
  redis.call('HSET', KEYS[1], 'generation', generation, 'layers', 1, 'count', 0, 'count:0', 0,
    unpack(ARGV, 1, #ARGV - 1))
  redis.call('HSET', KEYS[2], generation .. ':0', ARGV[#ARGV])
  made = 1
end
return {made, redis.call('HGETALL', KEYS[1])}
