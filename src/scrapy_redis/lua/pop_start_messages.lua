-- Pop a batch of start messages from the first non-empty of several keys.
-- KEYS[1..n] = the start keys (redis_key), highest priority first
-- ARGV[1] = "list" (LPOP: oldest first for RPUSH producers), "set" (SPOP) or "zset"
--           (ZPOPMAX: highest score first)
-- ARGV[2] = how many messages to pop at most
-- ARGV[3] = index (1-based) of the key being drained, tried first; 0 to try in key order
-- returns {index of the key popped from (0 if all are empty), message...}
local mode, count, current = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local function pop(key)
  if mode == 'list' then
    return redis.call('LPOP', key, count) or {}
  elseif mode == 'set' then
    return redis.call('SPOP', key, count)
  end
  local flat = redis.call('ZPOPMAX', key, count)
  local members = {}
  for i = 1, #flat, 2 do
    members[#members + 1] = flat[i]
  end
  return members
end

local function try(index)
  local items = pop(KEYS[index])
  if #items > 0 then
    return {index, unpack(items)}
  end
  return nil
end

if current > 0 then
  local reply = try(current)
  if reply then return reply end
end
for index = 1, #KEYS do
  if index ~= current then
    local reply = try(index)
    if reply then return reply end
  end
end
return {0}
