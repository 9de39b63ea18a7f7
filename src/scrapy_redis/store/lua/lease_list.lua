-- Pop requests from a list queue and lease them to a worker (see scrapy_redis.queues.leases).
-- KEYS[1] = the queue (list)
-- KEYS[2] = the leases hash: lease id -> cmsgpack {op, key, key2, arg, entry...}
-- KEYS[3] = the lease deadlines sorted set: lease id -> deadline in ms (server clock)
-- KEYS[4] = the deliveries hash (see lease_requeue.lua and select_leasable() in
--           _leases.lua): a worker takes at most one suspect at a time
-- ARGV[1] = "RPOP" (FIFO) or "LPOP" (LIFO)
-- ARGV[2] = how many entries to pop at most
-- ARGV[3] = lease timeout in ms
-- ARGV[4] = the id to lease the popped entries under (one lease for the batch)
-- ARGV[5..n] = this worker's leases whose work is done, released first: groups of
--              (lease id, n, n positions), n = 0 for the whole lease
-- returns the lease record {op, key, key2, arg, entry...} packed (its entries are the
--         popped ones, in pop order: one reply for the client to parse), "" if none
--#include _leases.lua

release_leases(KEYS[2], KEYS[3], 5, KEYS[4])
-- A lease with this id exists: this call is a retry (the reply to the first was lost),
-- so answer what the first call leased instead of popping more.
local leased = redis.call('HGET', KEYS[2], ARGV[4])
if leased then
  return leased
end
local items = redis.call(ARGV[1], KEYS[1], ARGV[2])
if not items then
  return ''
end
-- Put back with RPUSH (FIFO) or LPUSH (LIFO): at the end popped next.
local restore = 'lpush'
if ARGV[1] == 'RPOP' then
  restore = 'rpush'
end
local count = tonumber(ARGV[2])
local back
items, back = select_looking_past(KEYS[2], KEYS[4], ARGV[4], items, count, function(n)
  return redis.call(ARGV[1], KEYS[1], n)
end)
put_back(restore, KEYS[1], '', '', back)
if #items == 0 then
  return ''
end
local packed = pack_record(restore, KEYS[1], '', '', items)
lease(KEYS[2], KEYS[3], ARGV[4], ARGV[3], packed)
return packed
