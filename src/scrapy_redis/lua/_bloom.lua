-- Included (scrapy_redis.scripts) by the scripts that check and record fingerprints in a
-- layered, blocked Bloom filter (see scrapy_redis/bloom_dupefilter.py): not a script.
-- A fingerprint is seen if all its k bits are set in one layer; a new one gets its bits
-- set in the newest layer. The filter's keys, `fkeys`: [1] its meta hash (generation,
-- layers, count, count:<i>, capacity:<i>, layer:<i>), [2] the hash listing its block
-- groups (scrapy_redis/keys.py: bloom_blocks_key), [3..] the block keys of the batch.
-- `params`, a msgpack array: {layers the client knows, its generation, {k per layer},
--   {last bit of a block, per layer}, capacity, description and block count of the layer
--   added when the newest fills}
-- `blob`: per fingerprint, per layer: the index in `fkeys` of its block and its k bit
--   offsets, each a big-endian uint32 (one string: cheap to send).

-- The keys KEYS[first..], as a table (a loop: a batch may name thousands of blocks).
local function keys_from(first)
  local keys = {}
  for i = first, #KEYS do keys[#keys + 1] = KEYS[i] end
  return keys
end

-- BITFIELD_RO GET of each offset of `key`: the bits, in order.
local function bits_of(key, offsets)
  local out = {}
  for i = 1, #offsets, 1500 do
    local args = {}
    for j = i, math.min(i + 1499, #offsets) do
      args[#args + 1] = 'GET'; args[#args + 1] = 'u1'; args[#args + 1] = offsets[j]
    end
    local values = redis.call('BITFIELD_RO', key, unpack(args))
    for j = 1, #values do out[#out + 1] = values[j] end
  end
  return out
end

-- Set each offset of `key` to 1, the block first grown to its full size (INCRBY 0 of its
-- last bit changes nothing): its memory is allocated once, not at every new high bit.
local function set_bits(key, offsets, last)
  for i = 1, #offsets, 1500 do
    local args = {'INCRBY', 'u1', last, 0}
    for j = i, math.min(i + 1499, #offsets) do
      args[#args + 1] = 'SET'; args[#args + 1] = 'u1'; args[#args + 1] = offsets[j]; args[#args + 1] = 1
    end
    redis.call('BITFIELD', key, unpack(args))
  end
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

-- The filter as the client sees it, or nil if it is not the filter's (another worker
-- added a layer, or the filter was deleted): the client reloads it and sends again.
-- `room`: how many more fingerprints the newest layer holds (at least 1: a full layer
-- gets its successor in the call that fills it).
local function bloom_state(fkeys, params)
  local meta = fkeys[1]
  local fields = redis.call('HMGET', meta, 'layers', 'generation')
  local layers = tonumber(fields[1] or 0)
  if layers ~= params[1] or fields[2] ~= params[2] then
    return nil
  end
  local newest = layers - 1
  local sizes = redis.call('HMGET', meta, 'capacity:' .. newest, 'count:' .. newest)
  return {
    fkeys = fkeys, params = params, layers = layers, generation = fields[2],
    room = math.max(1, tonumber(sizes[1]) - tonumber(sizes[2])),
  }
end

-- Whether the k bits at span {key, first} of `lists` are all 1 in `got` (the bits read)
-- or in `set` (bits this batch sets: set[key][offset]).
local function all_set(lists, got, set, span, k)
  local key, first = span[1], span[2]
  local offsets, bits, ours = lists[key], got[key], set and set[key]
  for b = first, first + k - 1 do
    if bits[b] == 0 and not (ours and ours[offsets[b]]) then return false end
  end
  return true
end

-- Whether each of the first `count` fingerprints of the blob is new, as a table of
-- booleans, in batch order: a fingerprint the batch held before is seen. Reads only;
-- bloom_record() then sets the bits of the new ones.
local function bloom_find_new(state, blob, count)
  local ks, layers = state.params[3], state.layers
  local lists, spans, pos = {}, {}, 1
  for i = 1, count do
    local mine = {}
    for j = 1, layers do
      mine[j] = collect(lists, blob, pos, ks[j])
      pos = pos + 4 * (1 + ks[j])
    end
    spans[i] = mine
  end
  local got = {}
  for key, offsets in pairs(lists) do got[key] = bits_of(state.fkeys[key], offsets) end
  local set, new, added = {}, {}, 0
  for i = 1, count do
    local seen = false
    for j = 1, layers - 1 do
      if all_set(lists, got, nil, spans[i][j], ks[j]) then seen = true; break end
    end
    local span = spans[i][layers]
    new[i] = not seen and not all_set(lists, got, set, span, ks[layers])
    if new[i] then
      local key, offsets = span[1], lists[span[1]]
      set[key] = set[key] or {}
      for b = span[2], span[2] + ks[layers] - 1 do set[key][offsets[b]] = true end
      added = added + 1
    end
  end
  return new, {set = set, added = added}
end

-- Set the bits bloom_find_new() found, count the new fingerprints and, when the newest
-- layer is full, add the next layer. Returns the layer count and the filter's count.
local function bloom_record(state, found)
  local fkeys, params, last = state.fkeys, state.params, state.params[4][state.layers]
  for key, bits in pairs(found.set) do
    local offsets = {}
    for offset in pairs(bits) do offsets[#offsets + 1] = offset end
    set_bits(fkeys[key], offsets, last)
  end
  local meta, newest, layers = fkeys[1], state.layers - 1, state.layers
  local count = redis.call('HINCRBY', meta, 'count', found.added)
  local filled = redis.call('HINCRBY', meta, 'count:' .. newest, found.added)
  if filled >= tonumber(redis.call('HGET', meta, 'capacity:' .. newest)) then
    redis.call('HSET', meta, 'layers', layers + 1, 'count:' .. layers, 0,
      'capacity:' .. layers, params[5], 'layer:' .. layers, params[6])
    redis.call('HSET', fkeys[2], state.generation .. ':' .. layers, params[7])
    layers = layers + 1
  end
  return layers, count
end
