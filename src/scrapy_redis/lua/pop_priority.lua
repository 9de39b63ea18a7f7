-- Pop the oldest requests of the highest priority of a PriorityQueue, optionally leasing them.
-- KEYS[1] = the queue's index: sorted set, member = priority as text, score = -priority;
--           it may also hold entries written by the original scrapy-redis (member =
--           serialized request, score = -priority)
-- KEYS[2] = the list of the priority the caller expects to be the highest
-- KEYS[3], KEYS[4] = (to lease) the leases hash and the lease deadlines sorted set
-- ARGV[1] = that priority, as text
-- ARGV[2] = how many requests to pop at most
-- ARGV[3], ARGV[4], ARGV[5] = (to lease) timeout in ms, lease id prefix, first sequence number
-- ARGV[6..n] = (to lease) ids of this worker's leases whose work is done: released first
-- returns {0} when the queue is empty;
--         {1, priority, entries} after popping from KEYS[2], the entries packed in one
--         msgpack array (the list may have been emptied by another worker: then no
--         entries follow);
--         {2, priority} when the highest priority is another one: call again with it;
--         {3, entry, score} after removing an entry written by the original scrapy-redis
-- Leased entries are leased as ARGV[4] .. (ARGV[5] + n - 1), in the order returned.
-- redis.call(command, key, ...args), in calls of at most 1000 pairs (unpack's stack limit).
local function call_in_chunks(command, key, args)
  for i = 1, #args, 2000 do
    redis.call(command, key, unpack(args, i, math.min(i + 1999, #args)))
  end
end

-- Lease the popped entries: the i-th as ARGV[4] .. (ARGV[5] + i - 1), with records[i]
-- (cmsgpack {op, key, key2, arg, entry}) as its lease record.
local function lease(records)
  if #KEYS < 4 then
    return
  end
  local now = redis.call('TIME')
  local deadline = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[3])
  local fields, deadlines = {}, {}
  local first = tonumber(ARGV[5])
  for i, record in ipairs(records) do
    local id = ARGV[4] .. (first + i - 1)
    fields[2 * i - 1] = id
    fields[2 * i] = record
    deadlines[2 * i - 1] = deadline
    deadlines[2 * i] = id
  end
  call_in_chunks('HSET', KEYS[3], fields)
  call_in_chunks('ZADD', KEYS[4], deadlines)
end

if #KEYS >= 4 then
  local done = {}
  for i = 6, #ARGV do
    done[i - 5] = ARGV[i]
  end
  call_in_chunks('HDEL', KEYS[3], done)
  call_in_chunks('ZREM', KEYS[4], done)
end

local top = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #top == 0 then
  return {0}
end
local member, score = top[1], top[2]
if not string.match(member, '^%-?%d+$') then
  redis.call('ZREM', KEYS[1], member)
  lease({cmsgpack.pack({'zadd', KEYS[1], '', score, member})})
  return {3, member, score}
end
if member ~= ARGV[1] then
  return {2, member}
end
local items = redis.call('LPOP', KEYS[2], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[1], member)
end
if not items then
  return {1, member}
end
-- Records {'prio', KEYS[2], KEYS[1], member, item}: the first four packed once (0x95 =
-- array of 5).
local head = '\149' .. cmsgpack.pack('prio', KEYS[2], KEYS[1], member)
local records = {}
for i, item in ipairs(items) do
  records[i] = head .. cmsgpack.pack(item)
end
lease(records)
return {1, member, cmsgpack.pack(items)}
