-- Pop the oldest requests of the highest priority of a PriorityQueue, optionally leasing them.
-- KEYS[1] = the queue's index: sorted set, member = priority as text, score = -priority;
--           it may also hold entries written by the original scrapy-redis (member =
--           serialized request, score = -priority)
-- KEYS[2] = the list of the priority the caller expects to be the highest
-- KEYS[3], KEYS[4] = (to lease) the leases hash and the lease deadlines sorted set
-- KEYS[5] = (to lease) the deliveries hash (see lease_requeue.lua and select_leasable()
--           in _leases.lua): a worker takes at most one suspect at a time
-- ARGV[1] = that priority, as text
-- ARGV[2] = how many requests to pop at most
-- ARGV[3], ARGV[4] = (to lease) timeout in ms, the id to lease the popped entries under
-- ARGV[5..n] = (to lease) this worker's leases whose work is done, released first: groups
--              of (lease id, n, n positions), n = 0 for the whole lease
-- returns (the first element is a code, named by scrapy_redis.queues.priority.PopReply)
--         {0} when the queue is empty;
--         {1, priority, record} after popping from KEYS[2]: the record
--         {op, key, key2, arg, entry...} packed, its entries the popped ones in pop order
--         (the list may have been emptied by another worker: then no record follows);
--         {2, priority} when the highest priority is another one: call again with it;
--         {3, entry, score} after removing an entry written by the original scrapy-redis;
--         {4} when the worker holds a suspect and the highest priority has only suspects
--#include _leases.lua

if #KEYS >= 4 then
  release_leases(KEYS[3], KEYS[4], 5, KEYS[5])
  -- A lease with this id exists: this call is a retry (the reply to the first was lost),
  -- so answer what the first call leased instead of popping more.
  local leased = redis.call('HGET', KEYS[3], ARGV[4])
  if leased then
    local record = cmsgpack.unpack(leased)
    if record[1] == 'zadd' then
      return {3, record[5], record[4]}
    end
    return {1, record[4], leased}
  end
end

local top = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #top == 0 then
  return {0}
end
local member, score = top[1], top[2]
if not string.match(member, '^%-?%d+$') then
  redis.call('ZREM', KEYS[1], member)
  if #KEYS >= 4 then
    lease(KEYS[3], KEYS[4], ARGV[4], ARGV[3], pack_record('zadd', KEYS[1], '', score, {member}))
  end
  return {3, member, score}
end
if member ~= ARGV[1] then
  return {2, member}
end
local items = redis.call('LPOP', KEYS[2], ARGV[2])
if items and #KEYS >= 4 then
  local count = tonumber(ARGV[2])
  local back
  items, back = select_looking_past(KEYS[3], KEYS[5], ARGV[4], items, count, function(n)
    return redis.call('LPOP', KEYS[2], n)
  end)
  put_back('prio', KEYS[2], KEYS[1], member, back)
  if #items == 0 then
    return {4}
  end
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[1], member)
end
if not items then
  return {1, member}
end
local packed = pack_record('prio', KEYS[2], KEYS[1], member, items)
if #KEYS >= 4 then
  lease(KEYS[3], KEYS[4], ARGV[4], ARGV[3], packed)
end
return {1, member, packed}
