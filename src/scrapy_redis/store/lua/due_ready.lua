-- What of a queue's requests due later (see due_add.lua) is due, by this server's clock.
-- KEYS[1] = the requests due later (sorted set, score = when due, in ms)
-- ARGV[1] = how many due members to return at most
-- ARGV[2] = a window in ms (0: none)
-- returns {the members due now (oldest first, at most ARGV[1]), 1 if one is due within
--   ARGV[2] ms from now (with ARGV[2] = 0: if there is one at all), else 0}
--#include _expiry.lua

local now = server_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local window = tonumber(ARGV[2])
local soon
if window > 0 then
  soon = redis.call('ZCOUNT', KEYS[1], '-inf', now + window) > 0
else
  soon = redis.call('ZCARD', KEYS[1]) > 0
end
return {due, soon and 1 or 0}
