-- Put leased entries back where they were popped from, at the end popped next.
-- KEYS[1] = the leases hash: lease id -> cmsgpack {op, key, key2, arg, entry}
-- KEYS[2] = the lease deadlines sorted set
-- KEYS[3..n] = every key the records name (read them first: lease_expired.lua or HMGET)
-- ARGV[1] = "expired" to put back only leases past their deadline, "all" for any
-- ARGV[2..n] = lease ids, the most recently popped first
-- returns how many entries were put back
-- Record ops: "rpush"/"lpush" (list queue or list of start messages), "prio" (LPUSH to a
-- priority list key, ZADD its priority arg to the index key2), "zadd" (score arg), "sadd".
local declared = {}
for i = 3, #KEYS do
  declared[KEYS[i]] = true
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local requeued = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local raw = redis.call('HGET', KEYS[1], id)
  local deadline = tonumber(redis.call('ZSCORE', KEYS[2], id))
  if raw and (ARGV[1] == 'all' or deadline == nil or deadline < ms) then
    local record = cmsgpack.unpack(raw)
    local op, key, key2, arg, entry = record[1], record[2], record[3], record[4], record[5]
    if not declared[key] or (op == 'prio' and not declared[key2]) then
      return redis.error_reply('lease ' .. id .. ' names a key not in KEYS')
    end
    if op == 'rpush' then
      redis.call('RPUSH', key, entry)
    elseif op == 'lpush' then
      redis.call('LPUSH', key, entry)
    elseif op == 'prio' then
      redis.call('LPUSH', key, entry)
      redis.call('ZADD', key2, -tonumber(arg), arg)
    elseif op == 'zadd' then
      redis.call('ZADD', key, arg, entry)
    elseif op == 'sadd' then
      redis.call('SADD', key, entry)
    end
    redis.call('HDEL', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    requeued = requeued + 1
  end
end
return requeued
