-- Make start messages recurring (see scrapy_redis/start/recurring.py): each is served
-- every interval, its first run `delay` ms from now (server clock). A message recurring
-- already keeps its next run and takes the new interval.
-- KEYS[1] = the recurring messages (sorted set: message -> next run, ms)
-- KEYS[2] = their intervals (hash: message -> ms)
-- ARGV[1] = the interval in ms
-- ARGV[2] = ms from now to the first run
-- ARGV[3..n] = the messages
-- returns how many were not recurring before
local now = redis.call('TIME')
local first = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[2])
local added = 0
for i = 3, #ARGV do
  added = added + redis.call('ZADD', KEYS[1], 'NX', first, ARGV[i])
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[1])
end
return added
