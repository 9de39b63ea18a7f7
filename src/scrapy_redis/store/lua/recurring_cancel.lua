-- Stop recurring start messages (see scrapy_redis/start/recurring.py): each is removed
-- with its interval; a run leased already ends as it is.
-- KEYS[1] = the recurring messages (sorted set: message -> next run, ms)
-- KEYS[2] = their intervals (hash: message -> ms)
-- ARGV[1..n] = the messages
-- returns how many were recurring
local removed = 0
for i = 1, #ARGV do
  removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
end
return removed
