-- Push serialized requests of one priority onto a PriorityQueue, at most once.
-- KEYS[1] = the queue's index: sorted set, member = priority as text, score = -priority
-- KEYS[2] = the list holding the requests of that priority
-- KEYS[3] = the record key of this queue's writes to KEYS[2] (see _once.lua)
-- ARGV[1] = the priority (an integer, as text)
-- ARGV[2] = "back" to append (a new request), "front" to put back (an entry not processed)
-- ARGV[3] = how long the record is kept, in ms
-- ARGV[4] = the write number of this call
-- ARGV[5..n] = serialized requests, oldest first
-- returns the length of the list (the one recorded, for a copy of this call sent again
-- after its reply was lost: it pushes nothing)
--#include _once.lua

local before = applied_before(KEYS[3], ARGV[4])
if before then
  return tonumber(before)
end
local n
if ARGV[2] == 'front' then
  n = redis.call('LPUSH', KEYS[2], unpack(ARGV, 5))
else
  n = redis.call('RPUSH', KEYS[2], unpack(ARGV, 5))
end
redis.call('ZADD', KEYS[1], -tonumber(ARGV[1]), ARGV[1])
record_write(KEYS[3], ARGV[4], tostring(n), ARGV[3])
return n
