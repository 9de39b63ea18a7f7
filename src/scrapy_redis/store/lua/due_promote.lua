-- Move requests that are due (see due_add.lua) into their queue, each at most once: a
-- member not there any more (another worker moved it) or not due yet is left alone; one
-- that is no request due later (_due.lua) is set aside into KEYS[3], not moved.
-- KEYS[1] = the requests due later (sorted set)
-- KEYS[2] = the queue: a list (FifoQueue, LifoQueue: LPUSH adds) or a PriorityQueue's
--           index (sorted set, member = priority as text, score = -priority)
-- KEYS[3] = the queue's entries set aside as undecodable (a list, <queue key>:invalid)
-- KEYS[4..] = a PriorityQueue's lists, one per priority of the members (none for a list)
-- ARGV[1] = "list" or "priority"
-- ARGV[2] = the news channel, told when requests were moved ("" = nobody to tell)
-- ARGV[3] = how: "PUBLISH", or "SPUBLISH" on a Redis Cluster
-- ARGV[4], ARGV[5], ... = pairs: a member, the number of its priority's list (1 =
--           KEYS[4]; 0 for a list queue)
-- returns how many requests were moved
--#include _expiry.lua
--#include _due.lua

local readable = read_due(KEYS[1], KEYS[3], 4, 2, server_ms())
for _, entry in ipairs(readable) do
  local member, request = entry[1], entry[2]
  if ARGV[1] == 'priority' then
    local priority = tostring(request[1])
    redis.call('RPUSH', KEYS[tonumber(ARGV[entry[3] + 1]) + 3], request[3])
    redis.call('ZADD', KEYS[2], -tonumber(priority), priority)
  else
    redis.call('LPUSH', KEYS[2], request[3])
  end
  redis.call('ZREM', KEYS[1], member)
end
local moved = #readable
if moved > 0 and ARGV[2] ~= '' then
  redis.pcall(ARGV[3], ARGV[2], moved)
end
return moved
