-- List leases past their deadline: their worker died or stopped renewing them.
-- KEYS[1] = the leases hash
-- KEYS[2] = the lease deadlines sorted set
-- ARGV[1] = how many at most
-- returns {id, record, id, record, ...}
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ms, 'LIMIT', 0, ARGV[1])
local out = {}
for _, id in ipairs(ids) do
  local record = redis.call('HGET', KEYS[1], id)
  if record then
    out[#out + 1] = id
    out[#out + 1] = record
  else
    redis.call('ZREM', KEYS[2], id)
  end
end
return out
