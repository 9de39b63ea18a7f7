-- Write a batch of stat updates (RedisStatsCollector), at most once.
-- KEYS[1] = the stats hash
-- KEYS[2] = the record key of this collector's writes to it (see _once.lua)
-- ARGV[1] = how long the record is kept, in ms
-- ARGV[2] = the write number of this batch
-- ARGV[3..n] = the updates, four values each: "set", stat, encoded value, "" |
--              "inc", stat, increment (integer or float, as text), start value ("" for
--              none: a missing stat starts at 0) | "max" or "min", stat, encoded value,
--              "n" to compare as numbers or "s" as text (e.g. ISO-8601 UTC times)
-- returns "" when written, or when an earlier copy of this call was (sent again after
--         its reply was lost); else the updates Redis refused, "stat: error" per line
--         (the others are written)
--#include _once.lua

local before = applied_before(KEYS[2], ARGV[2])
if before then
  return before
end

-- HINCRBY for an integer increment, unless the stat holds a float: HINCRBYFLOAT then.
local function increment(stat, count, start)
  if start ~= '' and redis.call('HEXISTS', KEYS[1], stat) == 0 then
    redis.call('HSET', KEYS[1], stat, start)
  end
  if string.match(count, '^%-?%d+$') then
    local reply = redis.pcall('HINCRBY', KEYS[1], stat, count)
    if type(reply) ~= 'table' or not reply.err then
      return
    end
  end
  redis.call('HINCRBYFLOAT', KEYS[1], stat, count)
end

-- Set the stat if it is missing or if the value is beyond it (max_value / min_value).
local function bound(stat, value, mode, kind)
  local current = redis.call('HGET', KEYS[1], stat)
  if current then
    local a, b = current, value
    if kind == 'n' then
      a, b = tonumber(current), tonumber(value)
    end
    if a ~= nil and b ~= nil then
      if mode == 'max' and b <= a then return end
      if mode == 'min' and b >= a then return end
    end
  end
  redis.call('HSET', KEYS[1], stat, value)
end

local function update(op, stat, value, extra)
  if op == 'set' then
    redis.call('HSET', KEYS[1], stat, value)
  elseif op == 'inc' then
    increment(stat, value, extra)
  else
    bound(stat, value, op, extra)
  end
end

-- An update Redis refuses (a wrong type) is reported; the others are written all the same.
local refused = {}
for i = 3, #ARGV, 4 do
  local ok, err = pcall(update, ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
  if not ok then
    refused[#refused + 1] = ARGV[i + 1] .. ': ' .. tostring(type(err) == 'table' and err.err or err)
  end
end
local result = table.concat(refused, '\n')
record_write(KEYS[2], ARGV[2], result, ARGV[1])
return result
