-- Check and record a batch of fingerprints in a layered, blocked Bloom filter, at most
-- once (see _once.lua): a fingerprint is seen if all its k bits are set in one layer;
-- a new one gets its bits set in the newest layer. A batch is one atomic call, so two
-- workers racing on one fingerprint see it new exactly once.
-- KEYS[1] = the filter's key: its meta hash (generation, layers, count, count:<i>,
--           capacity:<i>, layer:<i>)
-- KEYS[2] = the record key of this filter's writes to KEYS[1] (see _once.lua)
-- KEYS[3] = the hash listing its block groups (see scrapy_redis/keys.py: bloom_blocks_key)
-- KEYS[4..] = the block keys the batch touches
-- ARGV[1] = how long the record is kept, in ms; ARGV[2] = the write number of this call
-- ARGV[3] = L, the layers the client knows; ARGV[4] = n, the fingerprints in the batch
-- ARGV[5..4+L] = k of each layer; ARGV[5+L..4+2L] = the last bit of a block of each layer
-- ARGV[5+2L], ARGV[6+2L] = capacity and description of the layer added when the newest fills
-- ARGV[7+2L] = per fingerprint, per layer: the index in KEYS of its block and its k bit
--             offsets, each a big-endian uint32 (one string: cheap to send)
-- ARGV[8+2L] = the generation the client knows; ARGV[9+2L] = block count of the next layer
-- Only the first fingerprints, as many as the newest layer has room for, are recorded (the
-- flags say how many): the client sends the others again, to the layer added for them.
-- returns {flags, layers, count}: flags a string with one '1' (new) or '0' (seen) per
-- fingerprint, layers the layer count after the call, count the fingerprints recorded in
-- all; {'stale', layers, '0'} (nothing done) if L or the generation are not the filter's
--#include _once.lua

-- BITFIELD(_RO) on `key`: GET (read) or SET to 1 (write) each offset; the old values.
-- A write first grows the block to its full size (INCRBY 0 of its last bit changes nothing).
local function bitfield(key, offsets, last)
  local out = {}
  for i = 1, #offsets, 1500 do
    local args = {}
    if last then args = {'INCRBY', 'u1', last, 0} end
    for j = i, math.min(i + 1499, #offsets) do
      if last then
        args[#args + 1] = 'SET'; args[#args + 1] = 'u1'; args[#args + 1] = offsets[j]; args[#args + 1] = 1
      else
        args[#args + 1] = 'GET'; args[#args + 1] = 'u1'; args[#args + 1] = offsets[j]
      end
    end
    local values = redis.call(last and 'BITFIELD' or 'BITFIELD_RO', key, unpack(args))
    for j = (last and 2 or 1), #values do out[#out + 1] = values[j] end
  end
  return out
end

local function all_set(values, first, k)
  for b = first, first + k - 1 do
    if values[b] == 0 then return false end
  end
  return true
end

-- Append the k offsets after the key index at byte `pos` of `blob` to that key's list in
-- `lists`; {key index, where its offsets start in the list}.
local function collect(lists, blob, pos, k)
  local key = struct.unpack('>I4', blob, pos)
  local list = lists[key] or {}
  lists[key] = list
  local first = #list + 1
  for b = 1, k do list[first + b - 1] = struct.unpack('>I4', blob, pos + 4 * b) end
  return {key, first}
end

local meta = KEYS[1]
local before = applied_before(KEYS[2], ARGV[2])
if before then
  return {before, redis.call('HGET', meta, 'layers'), redis.call('HGET', meta, 'count')}
end
local layers, n = tonumber(ARGV[3]), tonumber(ARGV[4])
local generation = redis.call('HGET', meta, 'generation')
if tonumber(redis.call('HGET', meta, 'layers') or 0) ~= layers
    or generation ~= ARGV[8 + 2 * layers] then
  return {'stale', redis.call('HGET', meta, 'layers') or '0', '0'}
end
local newest = layers - 1
-- no more fingerprints than the newest layer has room for: the rest go to the next one
local room = tonumber(redis.call('HGET', meta, 'capacity:' .. newest))
  - tonumber(redis.call('HGET', meta, 'count:' .. newest))
n = math.max(1, math.min(n, room))
local ks = {}
for j = 1, layers do ks[j] = tonumber(ARGV[4 + j]) end
local last = ARGV[4 + 2 * layers]

-- the bits of every fingerprint in the older layers, read key by key
local blob = ARGV[7 + 2 * layers]
local gets, items, pos = {}, {}, 1
for i = 1, n do
  local old = {}
  for j = 1, layers - 1 do
    old[j] = collect(gets, blob, pos, ks[j])
    pos = pos + 4 * (1 + ks[j])
  end
  items[i] = {old, pos}
  pos = pos + 4 * (1 + ks[layers])
end
local got = {}
for key, offsets in pairs(gets) do got[key] = bitfield(KEYS[key], offsets, nil) end

-- fingerprints found in no older layer are set in the newest, key by key, in batch order
local sets, spans = {}, {}
for i = 1, n do
  local seen = false
  for j, span in ipairs(items[i][1]) do
    if all_set(got[span[1]], span[2], ks[j]) then seen = true; break end
  end
  if not seen then spans[i] = collect(sets, blob, items[i][2], ks[layers]) end
end
local old_bits = {}
for key, offsets in pairs(sets) do old_bits[key] = bitfield(KEYS[key], offsets, last) end

local flags, added = {}, 0
for i = 1, n do
  local span = spans[i]
  if span and not all_set(old_bits[span[1]], span[2], ks[layers]) then
    flags[i] = '1'; added = added + 1
  else
    flags[i] = '0'
  end
end
flags = table.concat(flags)
local count = redis.call('HINCRBY', meta, 'count', added)
local filled = redis.call('HINCRBY', meta, 'count:' .. newest, added)
if filled >= tonumber(redis.call('HGET', meta, 'capacity:' .. newest)) then
  redis.call('HSET', meta, 'layers', layers + 1, 'count:' .. layers, 0,
    'capacity:' .. layers, ARGV[5 + 2 * layers], 'layer:' .. layers, ARGV[6 + 2 * layers])
  redis.call('HSET', KEYS[3], generation .. ':' .. layers, ARGV[9 + 2 * layers])
  layers = layers + 1
end
record_write(KEYS[2], ARGV[2], flags, ARGV[1])
return {flags, tostring(layers), tostring(count)}
