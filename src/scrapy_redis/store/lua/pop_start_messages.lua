-- Pop and lease a batch of start messages from the first non-empty of several keys.
-- KEYS[1] = the leases hash: lease id -> cmsgpack {op, key, key2, arg, message}
-- KEYS[2] = the lease deadlines sorted set: lease id -> deadline in ms (server clock)
-- KEYS[3..n] = the start keys (redis_key), highest priority first; with ARGV[7] = 1, then
--             the recurring messages (sorted set: message -> next run, ms on the server's
--             clock) and their intervals (hash: message -> ms)
-- ARGV[1] = "list" (LPOP: oldest first for RPUSH producers), "set" (SPOP) or "zset"
--           (ZPOPMAX: highest score first)
-- ARGV[2] = how many messages to pop at most
-- ARGV[3] = index (1-based, among the start keys) of the key being drained, tried first;
--           0 to try in key order
-- ARGV[4] = lease timeout in ms
-- ARGV[5] = lease id prefix (the worker id and ":")
-- ARGV[6] = sequence number of the first lease
-- ARGV[7] = 1 if the last two keys are the recurring messages (optional)
-- returns {index of the key popped from (0 if all are empty), message...}; the n-th
-- message is leased as ARGV[5] .. (ARGV[6] + n - 1). Recurring messages due are served
-- first, alone in their batch, under the index (number of start keys + 1): each is
-- leased (op "recur", the run it serves as arg) and its next run set, in this call, to
-- the first run after now on its schedule (a late round does not bring the next one
-- nearer; a worker dying with the lease makes that run due again, see _leases.lua).
local mode, count, current = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local recurring = ARGV[7] == '1'
local starts = #KEYS - 2 - (recurring and 2 or 0)

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

local function now_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

local function lease(key, items, scores, op)
  local ms = now_ms()
  op = op or ({list = 'lpush', set = 'sadd', zset = 'zadd'})[mode]
  for i, item in ipairs(items) do
    local id = ARGV[5] .. (tonumber(ARGV[6]) + i - 1)
    redis.call('HSET', KEYS[1], id, cmsgpack.pack({op, key, '', scores[i] or '', item}))
    redis.call('ZADD', KEYS[2], ms + tonumber(ARGV[4]), id)
  end
end

-- Claim the recurring messages due: lease each, set its next run.
local function claim_recurring()
  local key, every = KEYS[#KEYS - 1], KEYS[#KEYS]
  local now = now_ms()
  local flat = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, count)
  local items, scores = {}, {}
  for i = 1, #flat, 2 do
    local member, run = flat[i], tonumber(flat[i + 1])
    local interval = tonumber(redis.call('HGET', every, member))
    if interval and interval >= 1000 and interval < 1e15 and run then -- (>= 1 s, as push)
      if run ~= run or run < now - 1e15 then -- written by hand (-inf): due now
        run = now
      end
      local next_run = run + interval * (math.floor((now - run) / interval) + 1)
      redis.call('ZADD', key, next_run, member)
      items[#items + 1] = member
      scores[#scores + 1] = string.format('%.17g', run)
    else -- no interval, or not one (written by hand): not recurring
      redis.call('ZREM', key, member)
      redis.call('HDEL', every, member)
    end
  end
  if #items == 0 then
    return nil
  end
  lease(key, items, scores, 'recur')
  return {starts + 1, unpack(items)}
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
    for i = 3, starts + 3 do
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
if recurring then
  local reply = claim_recurring()
  if reply then return reply end
end
if current > 0 then
  local reply = try(current)
  if reply then return reply end
end
for index = 1, starts do
  if index ~= current then
    local reply = try(index)
    if reply then return reply end
  end
end
return {0}
