-- Record fingerprints in a lean duplicate filter's buckets (integer members of small
-- sets, see scrapy_redis/dupefilters/lean_layout.py) and count them, at most once: a copy of this
-- call sent again (its reply was lost) gets the first reply and writes nothing.
-- KEYS[1] = the filter's meta hash (field "count": the fingerprints recorded)
-- KEYS[2] = the record key of this writer's writes to the filter (see _once.lua)
-- KEYS[3], KEYS[4], ... = the buckets this call writes to
-- ARGV[1] = how long the record is kept, in ms
-- ARGV[2] = the write number of this call
-- ARGV[3], ARGV[4], ... = pairs: a bucket (1 for KEYS[3], 2 for KEYS[4]...), a member
-- returns {flags, count, largest}: flags has one character per pair, "1" if the member
--   was added (a new request) or "0" if it was there already; count is the number of
--   fingerprints recorded after the call; largest the size of the fullest bucket written
--#include _once.lua

local before = applied_before(KEYS[2], ARGV[2])
if before then
  return before
end
local flags, added, written, largest = {}, 0, {}, 0
for i = 3, #ARGV, 2 do
  local key = KEYS[tonumber(ARGV[i]) + 2]
  local new = redis.call('SADD', key, ARGV[i + 1])
  added = added + new
  flags[#flags + 1] = tostring(new)
  written[key] = true
end
for key = 3, #KEYS do
  if written[KEYS[key]] then
    largest = math.max(largest, redis.call('SCARD', KEYS[key]))
  end
end
local count = redis.call('HINCRBY', KEYS[1], 'count', added)
local reply = {table.concat(flags), count, largest}
record_write(KEYS[2], ARGV[2], reply, ARGV[1])
return reply
