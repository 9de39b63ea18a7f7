-- The registry of the workers sharing one queue: join, heartbeat and leave, each atomic.
-- KEYS[1] = hash: field = worker id, value = deadline in ms (server clock); the field
--           '~flushing' (a deadline too) while a worker deletes the shared keys itself
-- KEYS[2..n] = shared keys (queue, fingerprints) to delete when no other worker is alive
-- ARGV[1] = "join", "beat", "leave", or "flushed" (the shared keys claimed with ARGV[4]
--           = "2" are deleted: drop '~flushing')
-- ARGV[2] = this worker's id
-- ARGV[3] = worker timeout in ms: a worker silent for that long is gone
-- ARGV[4] = "1" to delete KEYS[2..n] if no other worker is alive (join: before
--           registering, i.e. SCHEDULER_FLUSH_ON_START; leave: SCHEDULER_PERSIST off);
--           "2" to claim their deletion instead (keys in several Redis Cluster slots: the
--           caller deletes them, then calls "flushed"): '~flushing' is set meanwhile
-- returns {other live workers, 1 if KEYS[2..n] were deleted (or claimed) else 0, 1 if
--         another worker's deletion is in progress (a worker joining waits for it)}
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local op, me, timeout = ARGV[1], ARGV[2], tonumber(ARGV[3])
local FLUSHING = '~flushing'

local others, flushing = 0, 0
local entries = redis.call('HGETALL', KEYS[1])
for i = 1, #entries, 2 do
  local id, deadline = entries[i], tonumber(entries[i + 1])
  if deadline == nil or deadline < now then
    redis.call('HDEL', KEYS[1], id)
  elseif id == FLUSHING then
    flushing = 1
  elseif id ~= me then
    others = others + 1
  end
end

if op == 'flushed' then
  redis.call('HDEL', KEYS[1], FLUSHING)
  return {others, 0, 0}
end
if op == 'join' and flushing == 1 then
  return {others, 0, 1}
end

local deleted = 0
if ARGV[4] == '1' and others == 0 and #KEYS > 1 then
  redis.call('UNLINK', unpack(KEYS, 2))
  deleted = 1
elseif ARGV[4] == '2' and others == 0 and flushing == 0 then
  redis.call('HSET', KEYS[1], FLUSHING, now + timeout)
  deleted = 1
end

if op == 'leave' then
  redis.call('HDEL', KEYS[1], me)
else
  redis.call('HSET', KEYS[1], me, now + timeout)
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], timeout * 2)
end
return {others, deleted, 0}
