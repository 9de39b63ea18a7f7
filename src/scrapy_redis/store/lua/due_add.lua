-- Put a request aside until it is due (see scrapy_redis/scheduling/due.py): a member of
-- the queue's sorted set of requests due later, scored by when it is due, in ms by this
-- server's clock.
-- KEYS[1] = the requests due later (sorted set)
-- ARGV[1] = in how many ms it is due
-- ARGV[2] = the member: msgpack {priority, a random number, the serialized request}
-- returns when it is due, in ms by this server's clock
--#include _expiry.lua

local due = server_ms() + tonumber(ARGV[1])
redis.call('ZADD', KEYS[1], due, ARGV[2])
return due
