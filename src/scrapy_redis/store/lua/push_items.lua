-- Append serialized items to their lists (RedisPipeline), each item at most once.
-- KEYS = pairs (items list, its record key for this pipeline: see _once.lua)
-- ARGV[1] = how long records are kept, in ms
-- ARGV[2..n] = triples in the order the items were processed: number of the item's pair
--              in KEYS (1 = the first), the item's write number (growing), the item
-- returns how many items were appended: an item whose number is not above the last one
--         recorded for its list was appended by an earlier copy of this call (sent again
--         after its reply was lost), or by an earlier call, and is not appended again
--#include _once.lua
--#include _chunks.lua

-- A list key of another type fails the whole call before anything is written (the
-- pipeline then fails the call's items, none of which was stored).
for i = 1, #KEYS, 2 do
  local kind = redis.call('TYPE', KEYS[i]).ok
  if kind ~= 'list' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. kind .. ', not a list')
  end
end
local last, fresh = {}, {}
for i = 1, #KEYS, 2 do
  last[i] = last_write(KEYS[i + 1])
  fresh[i] = {}
end
local appended, newest = 0, {}
for i = 2, #ARGV, 3 do
  local pair, number = 2 * tonumber(ARGV[i]) - 1, tonumber(ARGV[i + 1])
  if number > last[pair] then
    table.insert(fresh[pair], ARGV[i + 2])
    newest[pair] = number
    appended = appended + 1
  end
end
for pair, items in pairs(fresh) do
  call_in_chunks('RPUSH', KEYS[pair], items)
  if newest[pair] then
    record_write(KEYS[pair + 1], newest[pair], '', ARGV[1])
  end
end
return appended
