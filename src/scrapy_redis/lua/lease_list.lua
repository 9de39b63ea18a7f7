-- Pop requests from a list queue and lease them to a worker (see scrapy_redis.leases).
-- KEYS[1] = the queue (list)
-- KEYS[2] = the leases hash: lease id -> cmsgpack {op, key, key2, arg, entry}
-- KEYS[3] = the lease deadlines sorted set: lease id -> deadline in ms (server clock)
-- ARGV[1] = "RPOP" (FIFO) or "LPOP" (LIFO)
-- ARGV[2] = how many entries to pop at most
-- ARGV[3] = lease timeout in ms
-- ARGV[4] = lease id prefix (the worker id and ":")
-- ARGV[5] = sequence number of the first lease
-- ARGV[6..n] = ids of this worker's leases whose work is done: released first
-- returns the popped entries; the n-th is leased as ARGV[4] .. (ARGV[5] + n - 1)
for i = 6, #ARGV do
  redis.call('HDEL', KEYS[2], ARGV[i])
  redis.call('ZREM', KEYS[3], ARGV[i])
end
local items = redis.call(ARGV[1], KEYS[1], ARGV[2])
if not items then
  return {}
end
local now = redis.call('TIME')
local deadline = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[3])
local restore = 'lpush'
if ARGV[1] == 'RPOP' then
  restore = 'rpush'
end
for i, item in ipairs(items) do
  local id = ARGV[4] .. (tonumber(ARGV[5]) + i - 1)
  redis.call('HSET', KEYS[2], id, cmsgpack.pack({restore, KEYS[1], '', '', item}))
  redis.call('ZADD', KEYS[3], deadline, id)
end
return items
