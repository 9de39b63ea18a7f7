-- Push one batch of requests due later moved from another Redis (python -m
-- scrapy_redis.move_crawl) into a queue's (or lane's) requests due later, each due after
-- the time it had left on the source, by this server's clock. The members a batch not yet
-- confirmed removed from the source pushed already are skipped (see lua/move_push.lua,
-- lua/move_confirm.lua): a move killed after pushing a batch and before removing it from
-- the source pushes none of it twice when it is run again.
-- KEYS[1] = the members pushed whose removal from the source is not confirmed yet (a hash:
--           SHA1 of the member -> copies; <queue key>:moving)
-- KEYS[2] = the requests due later (<queue key>:due: a sorted set, score = when due, ms)
-- ARGV[1..n] = pairs (ms it is due in, from now; the member)
-- returns how many members were pushed (the others were pushed before)
--#include _expiry.lua

local now = server_ms()
local pushed = 0
for i = 1, #ARGV, 2 do
  local member = ARGV[i + 1]
  local digest = redis.sha1hex(member)
  if (tonumber(redis.call('HGET', KEYS[1], digest)) or 0) == 0 then
    redis.call('ZADD', KEYS[2], 'NX', now + math.max(0, tonumber(ARGV[i])), member)
    redis.call('HINCRBY', KEYS[1], digest, 1)
    pushed = pushed + 1
  end
end
return pushed
