-- Pop and lease a batch of start messages from the first non-empty of several keys.
-- KEYS[1] = the leases hash: lease id -> cmsgpack {op, key, key2, arg, message}
-- KEYS[2] = the lease deadlines sorted set: lease id -> deadline in ms (server clock)
-- KEYS[3..n] = the start keys (redis_key), highest priority first
-- ARGV[1] = "list" (LPOP: oldest first for RPUSH producers), "set" (SPOP) or "zset"
--           (ZPOPMAX: highest score first)
-- ARGV[2] = how many messages to pop at most
-- ARGV[3] = index (1-based, among the start keys) of the key being drained, tried first;
--           0 to try in key order
-- ARGV[4] = lease timeout in ms
-- ARGV[5] = lease id prefix (the worker id and ":")
-- ARGV[6] = sequence number of the first lease
-- returns {index of the key popped from (0 if all are empty), message...}; the n-th
-- message is leased as ARGV[5] .. (ARGV[6] + n - 1)
local mode, count, current = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local function pop(key)
  if mode == 'list' then
    return redis.call('LPOP', key, count) or {}, {}
  elseif mode == 'set' then
    return redis.call('SPOP', key, count), {}
  end
  local flat = redis.call('ZPOPMAX', key, count)
  local members, scores = {}, {}
  for i = 1, #flat, 2 do
    members[#members + 1] = flat[i]
    scores[#scores + 1] = flat[i + 1]
  end
  return members, scores
end

local function lease(key, items, scores)
  local now = redis.call('TIME')
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local op = ({list = 'lpush', set = 'sadd', zset = 'zadd'})[mode]
  for i, item in ipairs(items) do
    local id = ARGV[5] .. (tonumber(ARGV[6]) + i - 1)
    redis.call('HSET', KEYS[1], id, cmsgpack.pack({op, key, '', scores[i] or '', item}))
    redis.call('ZADD', KEYS[2], ms + tonumber(ARGV[4]), id)
  end
end

local function try(index)
  local key = KEYS[index + 2]
  local items, scores = pop(key)
  if #items == 0 then
    return nil
  end
  lease(key, items, scores)
  return {index, unpack(items)}
end

-- Leases with these ids exist: this call is a retry (the reply to the first was lost),
-- so answer what the first call leased instead of popping more.
local function leased_before()
  local messages, index = {}, 0
  while #messages < count do
    local raw = redis.call('HGET', KEYS[1], ARGV[5] .. (tonumber(ARGV[6]) + #messages))
    if not raw then
      break
    end
    local record = cmsgpack.unpack(raw)
    for i = 3, #KEYS do
      if KEYS[i] == record[2] then
        index = i - 2
      end
    end
    messages[#messages + 1] = record[5]
  end
  if #messages == 0 then
    return nil
  end
  return {index, unpack(messages)}
end

local before = leased_before()
if before then
  return before
end
if current > 0 then
  local reply = try(current)
  if reply then return reply end
end
for index = 1, #KEYS - 2 do
  if index ~= current then
    local reply = try(index)
    if reply then return reply end
  end
end
return {0}
