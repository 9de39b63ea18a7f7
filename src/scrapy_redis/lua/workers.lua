-- The registry of the workers sharing one queue: join, heartbeat and leave, each atomic.
-- KEYS[1] = hash: field = worker id, value = deadline in ms (server clock)
-- KEYS[2..n] = shared keys (queue, fingerprints) to delete when no other worker is alive
-- ARGV[1] = "join", "beat" or "leave"
-- ARGV[2] = this worker's id
-- ARGV[3] = worker timeout in ms: a worker silent for that long is gone
-- ARGV[4] = "1" to delete KEYS[2..n] if no other worker is alive (join: before
--           registering, i.e. SCHEDULER_FLUSH_ON_START; leave: SCHEDULER_PERSIST off)
-- returns {other live workers, 1 if KEYS[2..n] were deleted else 0}
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local op, me, timeout = ARGV[1], ARGV[2], tonumber(ARGV[3])

local others = 0
local entries = redis.call('HGETALL', KEYS[1])
for i = 1, #entries, 2 do
  local id, deadline = entries[i], tonumber(entries[i + 1])
  if deadline == nil or deadline < now then
    redis.call('HDEL', KEYS[1], id)
  elseif id ~= me then
    others = others + 1
  end
end

local deleted = 0
if ARGV[4] == '1' and others == 0 and #KEYS > 1 then
  redis.call('UNLINK', unpack(KEYS, 2))
  deleted = 1
end

if op == 'leave' then
  redis.call('HDEL', KEYS[1], me)
else
  redis.call('HSET', KEYS[1], me, now + timeout)
  redis.call('PEXPIRE', KEYS[1], timeout * 2)
end
return {others, deleted}
