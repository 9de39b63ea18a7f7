-- Push serialized requests onto a list queue (FifoQueue, LifoQueue), at most once.
-- KEYS[1] = the queue (list)
-- KEYS[2] = the record key of this queue's writes to KEYS[1] (see _once.lua)
-- ARGV[1] = "LPUSH" (a new request; also puts back at the end a LIFO pops) or "RPUSH"
--           (puts back at the end a FIFO pops)
-- ARGV[2] = how long the record is kept, in ms
-- ARGV[3] = the write number of this call
-- ARGV[4..n] = serialized requests, pushed in this order
-- returns the length of the list (the one recorded, for a copy of this call sent again
-- after its reply was lost: it pushes nothing)
--#include _once.lua

local before = applied_before(KEYS[2], ARGV[3])
if before then
  return tonumber(before)
end
local n = redis.call(ARGV[1], KEYS[1], unpack(ARGV, 4))
record_write(KEYS[2], ARGV[3], tostring(n), ARGV[2])
return n
