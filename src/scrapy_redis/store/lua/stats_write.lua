-- Write a batch of stat updates (RedisStatsCollector) to the fleet's hash, and this
-- worker's own stats to its hash, at most once.
-- KEYS[1] = the fleet's stats hash
-- KEYS[2] = the record key of this collector's writes to it (see _once.lua)
-- KEYS[3] = this worker's stats hash
-- KEYS[4] = the sorted set of the workers with a stats hash (member: worker id, score:
--           its last write, POSIX seconds on this server's clock)
-- ARGV[1] = how long the record is kept, in ms
-- ARGV[2] = the write number of this batch
-- ARGV[3] = how long the worker's hash (and the sorted set) are kept, in ms
-- ARGV[4] = the worker id
-- ARGV[5] = "1": replace the worker's hash by the fields given, "0": set them
-- ARGV[6] = w, the number of the worker's fields given
-- ARGV[7..6+2w] = the worker's fields: name, encoded value (its stats' current values)
-- ARGV[7+2w..n] = the fleet's updates, four values each: "set", stat, encoded value, "" |
--              "inc", stat, increment (integer or float, as text), start value ("" for
--              none: a missing stat starts at 0) | "max" or "min", stat, encoded value,
--              "n" to compare as numbers or "s" as text (e.g. ISO-8601 UTC times)
-- returns {refused, missing}: refused is "" when written, or when an earlier copy of this
--         call was (sent again after its reply was lost: its reply is returned); else the
--         updates Redis refused, "stat: error" per line (the others are written). missing
--         is 1 when the worker's hash did not exist before a write that did not replace
--         it (it expired: the collector then replaces it with all its stats), else 0.
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

local function error_text(err)
  return tostring(type(err) == 'table' and err.err or err)
end

-- The worker's own stats (current values: writing them twice does no harm), when it
-- wrote, and its entry in the sorted set of workers (entries older than the hashes'
-- time to live are dropped: their hashes have expired).
local function write_worker(fields_end)
  local time = redis.call('TIME')
  local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
  local missing = 0
  if ARGV[5] == '1' then
    redis.call('DEL', KEYS[3])
  elseif redis.call('EXISTS', KEYS[3]) == 0 then
    missing = 1
  end
  for i = 7, fields_end, 2 do
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  end
  redis.call('HSET', KEYS[3], 'worker/updated_at', string.format('%.6f', now))
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
  local ttl = tonumber(ARGV[3]) / 1000
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. string.format('%.6f', now - ttl))
  redis.call('ZADD', KEYS[4], string.format('%.6f', now), ARGV[4])
  redis.call('PEXPIRE', KEYS[4], ARGV[3])
  return missing
end

-- An update Redis refuses (a wrong type) is reported; the others are written all the same.
local refused = {}
local fields_end = 6 + 2 * tonumber(ARGV[6])
for i = fields_end + 1, #ARGV, 4 do
  local ok, err = pcall(update, ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
  if not ok then
    refused[#refused + 1] = ARGV[i + 1] .. ': ' .. error_text(err)
  end
end
local ok, missing = pcall(write_worker, fields_end)
if not ok then
  refused[#refused + 1] = KEYS[3] .. ': ' .. error_text(missing)
  missing = 0
end
local result = {table.concat(refused, '\n'), missing}
record_write(KEYS[2], ARGV[2], result, ARGV[1])
return result
