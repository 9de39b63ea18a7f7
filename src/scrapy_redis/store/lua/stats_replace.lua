-- Replace the fleet's stats hash by the stats given (RedisStatsCollector.set_stats), in
-- one step: on a Redis Cluster too, where redis-py 5 refuses MULTI/EXEC pipelines.
-- KEYS[1] = the fleet's stats hash
-- ARGV = field, encoded value, field, encoded value... (none: the hash is deleted)
redis.call('DEL', KEYS[1])
for i = 1, #ARGV, 2000 do -- 1000 fields a call (Lua's unpack() takes under 8,000 values)
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 1999, #ARGV)))
end
return #ARGV / 2
