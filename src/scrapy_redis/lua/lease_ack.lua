-- Release leases whose work is done (see scrapy_redis.leases).
-- KEYS[1] = the leases hash
-- KEYS[2] = the lease deadlines sorted set
-- ARGV[1..n] = lease ids
-- returns how many of them were still leased
local released = 0
for _, id in ipairs(ARGV) do
  released = released + redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
end
return released
