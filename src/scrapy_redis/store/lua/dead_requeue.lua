-- Put dead letters back where they were popped from (at the end popped next), oldest
-- first: after the cause is fixed, or to give them another chance.
-- KEYS[1] = the dead letters list: cmsgpack {op, key, key2, arg, entry}, one per entry
-- KEYS[2..n] = every key the first ARGV[1] records name (read them first with LRANGE)
-- ARGV[1] = how many to put back at most
-- returns how many were put back; an error, with nothing changed, if a record names a
--         key not in KEYS (the list changed meanwhile: read it again)
--#include _leases.lua

local declared = {}
for i = 2, #KEYS do
  declared[KEYS[i]] = true
end
local raws = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local records = {}
for i, raw in ipairs(raws) do
  local record = cmsgpack.unpack(raw)
  if not declared[record[2]] or (record[1] == 'prio' and not declared[record[3]]) then
    return redis.error_reply('a dead letter names a key not in KEYS: read the list again')
  end
  records[i] = record
end
redis.call('LTRIM', KEYS[1], #raws, -1)
-- The oldest dead letter is popped first: put them back newest first.
for i = #records, 1, -1 do
  local record = records[i]
  put_back(record[1], record[2], record[3], record[4], {record[5]})
end
return #records
