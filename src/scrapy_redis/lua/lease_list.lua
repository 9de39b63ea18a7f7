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
-- returns the popped entries packed in one msgpack array ("" if none: one reply for the
--         client to parse, not one per entry); the n-th is leased as ARGV[4] .. (ARGV[5] + n - 1)
-- redis.call(command, key, ...args), in calls of at most 1000 pairs (unpack's stack limit).
local function call_in_chunks(command, key, args)
  for i = 1, #args, 2000 do
    redis.call(command, key, unpack(args, i, math.min(i + 1999, #args)))
  end
end

local done = {}
for i = 6, #ARGV do
  done[i - 5] = ARGV[i]
end
call_in_chunks('HDEL', KEYS[2], done)
call_in_chunks('ZREM', KEYS[3], done)
local items = redis.call(ARGV[1], KEYS[1], ARGV[2])
if not items then
  return ''
end
local now = redis.call('TIME')
local deadline = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[3])
local restore = 'lpush'
if ARGV[1] == 'RPOP' then
  restore = 'rpush'
end
-- Each record is the msgpack array {restore, KEYS[1], '', '', item}: its first four
-- elements are the same for every item, so they are packed once (0x95 = array of 5).
local head = '\149' .. cmsgpack.pack(restore, KEYS[1], '', '')
local records, deadlines = {}, {}
local first = tonumber(ARGV[5])
for i, item in ipairs(items) do
  local id = ARGV[4] .. (first + i - 1)
  records[2 * i - 1] = id
  records[2 * i] = head .. cmsgpack.pack(item)
  deadlines[2 * i - 1] = deadline
  deadlines[2 * i] = id
end
call_in_chunks('HSET', KEYS[2], records)
call_in_chunks('ZADD', KEYS[3], deadlines)
return cmsgpack.pack(items)
