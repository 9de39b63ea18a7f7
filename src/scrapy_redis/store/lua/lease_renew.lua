-- Push back the deadlines of leases a live worker still holds (its heartbeat).
-- KEYS[1] = the lease deadlines sorted set
-- ARGV[1] = lease timeout in ms
-- ARGV[2..n] = lease ids
-- returns how many were renewed (a lease already recovered by another worker is not)
local now = redis.call('TIME')
local deadline = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[1])
local renewed = 0
for i = 2, #ARGV do
  renewed = renewed + redis.call('ZADD', KEYS[1], 'XX', 'CH', deadline, ARGV[i])
end
return renewed
