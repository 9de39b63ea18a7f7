-- Included (scrapy_redis.scripts) by the scripts that check and record fingerprints in a
-- layered, blocked Bloom filter (see scrapy_redis/bloom_dupefilter.py): not a script.
-- A fingerprint is seen if all its k bits are set in one layer; a new one gets its bits
-- set in the newest layer. The filter's keys, `fkeys`: [1] its meta hash (generation,
-- layers, count, count:<i>, capacity:<i>, layer:<i>), [2] the hash listing its block
-- groups (scrapy_redis/keys.py: bloom_blocks_key), [3..] the block keys of the batch.
-- `params`, a msgpack array: {layers the client knows, its generation, {k per layer},
--   {last bit of a block, per layer}, capacity, description and block count of the layer
--   added when the newest fills}
-- `plan`, a msgpack array {gets, sets, where}, made by the client so that the script
--   only passes arguments on: `gets` and `sets` are lists of {index in `fkeys`, the
--   arguments of one BITFIELD_RO (GET u1 <offset> ...: the older layers) or BITFIELD
--   (INCRBY u1 <last bit> 0, then SET u1 <offset> 1 ...: the newest layer) call};
--   `where` has, per fingerprint, per layer, the number of its call in `gets` (older
--   layers) or `sets` (newest) and the number of its first bit among that call's
--   operations (its k bits are the next k). The calls of one key are in batch order.

-- The keys KEYS[first..], as a table (a loop: a batch may name thousands of blocks).
local function keys_from(first)
  local keys = {}
  for i = first, #KEYS do keys[#keys + 1] = KEYS[i] end
  return keys
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

-- Whether the `k` values of `values` from `first` on are all 1.
local function ones(values, first, k)
  for b = first, first + k - 1 do
    if values[b] ~= 1 then return false end
  end
  return true
end

-- Which of the first `count` fingerprints are in an older layer: {[i] = true}, and
-- whether there is one.
local function in_older_layers(state, plan, count)
  local gets, where, ks, layers = plan[1], plan[3], state.params[3], state.layers
  local found, any = {}, false
  if layers == 1 then return found, any end
  local got = {}
  for c, call in ipairs(gets) do
    got[c] = redis.call('BITFIELD_RO', state.fkeys[call[1]], unpack(call[2]))
  end
  for i = 1, count do
    for j = 1, layers - 1 do
      local w = ((i - 1) * layers + j - 1) * 2 + 1
      if ones(got[where[w]], where[w + 1], ks[j]) then found[i] = true; any = true; break end
    end
  end
  return found, any
end

-- The `sets` calls for the fingerprints `i` <= count not `found` in an older layer only:
-- the calls rebuilt without the others, and the new first-bit numbers {[i] = n}.
local function sets_without(plan, state, count, found)
  local sets, where, layers, k = plan[2], plan[3], state.layers, state.params[3][state.layers]
  local calls, firsts = {}, {}
  for c, call in ipairs(sets) do
    calls[c] = {call[1], {call[2][1], call[2][2], call[2][3], call[2][4]}, 0}
  end
  for i = 1, count do
    if not found[i] then
      local w = ((i - 1) * layers + layers - 1) * 2 + 1
      local call, old_args = calls[where[w]], sets[where[w]][2]
      local args, from = call[2], 4 + (where[w + 1] - 1) * 4
      for a = from + 1, from + 4 * k do args[#args + 1] = old_args[a] end
      firsts[i] = call[3] + 1
      call[3] = call[3] + k
    end
  end
  return calls, firsts
end

-- Check and set the bits of the first `count` fingerprints of the plan: whether each is
-- new, in batch order (a fingerprint the batch held before is seen). A fingerprint
-- found in an older layer is seen; the others have their bits set in the newest layer
-- (BITFIELD SET answers the old bits: new if one was 0). Counting them and growing the
-- filter is bloom_record()'s.
local function bloom_find_new(state, plan, count)
  local where, layers, k = plan[3], state.layers, state.params[3][state.layers]
  local total = #where / (2 * layers)
  local found, any = in_older_layers(state, plan, count)
  local calls, firsts = plan[2], nil
  if any or count < total then
    calls, firsts = sets_without(plan, state, count, found)
  end
  local old = {}
  for c, call in ipairs(calls) do
    if #call[2] > 4 then
      old[c] = redis.call('BITFIELD', state.fkeys[call[1]], unpack(call[2]))
    end
  end
  local new, added = {}, 0
  for i = 1, count do
    local w = ((i - 1) * layers + layers - 1) * 2 + 1
    local first = firsts and firsts[i] or where[w + 1]
    -- the reply's first value answers INCRBY: the bits come after it
    new[i] = not found[i] and not ones(old[where[w]], first + 1, k)
    if new[i] then added = added + 1 end
  end
  return new, {added = added}
end

-- Count the new fingerprints bloom_find_new() found and, when the newest layer is full,
-- add the next layer. Returns the layer count and the filter's count.
local function bloom_record(state, found)
  local fkeys, params = state.fkeys, state.params
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
