-- Push serialized requests of one priority onto a PriorityQueue.
-- KEYS[1] = the queue's index: sorted set, member = priority as text, score = -priority
-- KEYS[2] = the list holding the requests of that priority
-- ARGV[1] = the priority (an integer, as text)
-- ARGV[2] = "back" to append (a new request), "front" to put back (an entry not processed)
-- ARGV[3..n] = serialized requests, oldest first
-- returns the length of the list
local n
if ARGV[2] == 'front' then
  n = redis.call('LPUSH', KEYS[2], unpack(ARGV, 3))
else
  n = redis.call('RPUSH', KEYS[2], unpack(ARGV, 3))
end
redis.call('ZADD', KEYS[1], -tonumber(ARGV[1]), ARGV[1])
return n
