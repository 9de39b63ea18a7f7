-- Check, and record, how many lanes a crawl is split into (SCHEDULER_SHARDS, see
-- scrapy_redis/scheduling/lanes.py), in one step: a worker is refused when the crawl's data has
-- another layout.
-- KEYS[1] = the lanes key (a string: the lane count; a crawl not split has none)
-- KEYS[2..n] = the keys of the crawl not split (its queue, lease keys, filter keys): where
--              they hold data the crawl is not split, whatever this worker asks
-- ARGV[1] = this worker's lane count
-- ARGV[2] = "1" to record ARGV[1] (if above 1) when nothing says otherwise, "0" to check only
-- returns the lane count of the crawl's data: the one recorded; else 1 if a key of
--         KEYS[2..n] exists; else ARGV[1] (recorded if asked)
local stored = redis.call('GET', KEYS[1])
if stored then
  return tonumber(stored)
end
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return 1
  end
end
if ARGV[2] == '1' and tonumber(ARGV[1]) > 1 then
  redis.call('SET', KEYS[1], ARGV[1])
end
return tonumber(ARGV[1])
