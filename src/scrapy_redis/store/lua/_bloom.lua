-- Included (scrapy_redis.store.scripts) by the scripts that check and record fingerprints in a
-- layered, blocked Bloom filter (see scrapy_redis/dupefilters/bloom.py): not a script.
-- A fingerprint is seen if all its k bits are set in one layer; a new one gets its bits
-- set in the newest layer. Fingerprints come as 40 lowercase hex digits, from which the
-- bits are computed here (the layout: scrapy_redis/dupefilters/bloom_layout.py's docstring); the
-- client computes only their blocks, whose keys it declares.
-- The filter's keys, `fkeys`: [1] its meta hash (generation, layers, count, count:<i>,
-- capacity:<i>, layer:<i>), [2] the hash listing its block groups (scrapy_redis/store/keys.py:
-- bloom_blocks_key), [3..] the block keys of the batch, in the order of `blocks`.
-- `params`, a msgpack array: {layers the client knows, its generation, {k per layer},
--   {blocks per layer}, {bits of a block, per layer}, capacity, description and block
--   count of the layer added when the newest fills}
-- `blocks`, a msgpack array: per layer, the numbers of its blocks whose keys follow
--   fkeys[2] (layer 0's first), each once: every block the batch's fingerprints fall in.

-- Bit operations per BITFIELD call (Lua's unpack() takes some 8,000 values).
local BLOOM_OPS_PER_CALL = 1500
-- (locals: read faster than globals, per fingerprint)
local sub, tonumber = string.sub, tonumber

-- The keys KEYS[first..], as a table (a loop: a batch may name thousands of blocks).
local function keys_from(first)
  local keys = {}
  for i = first, #KEYS do keys[#keys + 1] = KEYS[i] end
  return keys
end

-- Fail (nothing written yet) on a call whose arguments do not follow this file's format.
local function bloom_refuse(what)
  error({err = 'ERR Bloom filter call: ' .. what ..
    ' (a worker of another scrapy-redis version on this filter?)'})
end

-- The block keys of the call by layer: named[j + 1][block number] = its key in `fkeys`.
local function bloom_named(fkeys, blocks, layers)
  if #blocks ~= layers then bloom_refuse('blocks of ' .. #blocks .. ' layers') end
  local named, n = {}, 2
  for j = 1, layers do
    local keys = {}
    for _, block in ipairs(blocks[j]) do
      n = n + 1
      keys[block] = fkeys[n]
    end
    named[j] = keys
  end
  if n ~= #fkeys then bloom_refuse(#fkeys - 2 .. ' keys for ' .. n - 2 .. ' blocks') end
  return named
end

-- The filter as the client sees it, or nil if it is not the filter's (another worker
-- added a layer, or the filter was deleted): the client reloads it and sends again.
-- `room`: how many more fingerprints the newest layer holds (at least 1: a full layer
-- gets its successor in the call that fills it).
local function bloom_state(fkeys, params, blocks)
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
    named = bloom_named(fkeys, blocks, layers),
  }
end

-- The BITFIELD calls of a batch on layer `j` (0: the first), filled by bits_add():
-- `calls` in batch order, each {key, args, ops}, of at most BLOOM_OPS_PER_CALL
-- operations after `head` (nothing, or one operation each call starts with);
-- `open[block]` the call being filled for a block; `call[i]` and `first[i]` where the
-- i-th fingerprint added has its bits (values first[i] .. first[i] + k - 1 of the
-- call's reply). `value`: the value each operation sets (nil: a GET).
local function bits_plan(state, j, value, head)
  local params = state.params
  return {
    named = state.named[j + 1], k = params[3][j + 1], blocks = params[4][j + 1],
    m = params[5][j + 1], j = j, value = value, head = head, skip = #head > 0 and 1 or 0,
    calls = {}, open = {}, call = {}, first = {},
  }
end

-- The call of `plan` that takes the next k operations on block `block`, and its number.
local function bits_call(plan, block)
  local c = plan.open[block]
  local call = c and plan.calls[c]
  if not call or call.ops + plan.k > BLOOM_OPS_PER_CALL then
    local key = plan.named[block]
    if not key then bloom_refuse('block ' .. block .. ' of layer ' .. plan.j .. ' not declared') end
    call = {key = key, args = {unpack(plan.head)}, n = #plan.head, ops = 0}
    c = #plan.calls + 1
    plan.calls[c], plan.open[block] = call, c
  end
  return call, c
end

-- Append the k operations on the bits of `fingerprint` (the i-th of the batch, 40 hex
-- digits) to `plan`: its block is digits 1-12 (layer 0) or 33-40 (a later layer j) modulo
-- the block count; its bits, by enhanced double hashing from h1 (digits 13-22) and h2
-- (23-32) of the fingerprint (layer 0) or of SHA1('<fingerprint>:<j>').
local function bits_add(plan, i, fingerprint)
  local digest, block = fingerprint, nil
  if plan.j == 0 then
    block = tonumber(sub(fingerprint, 1, 12), 16)
  else
    digest = redis.sha1hex(fingerprint .. ':' .. plan.j)
    block = tonumber(sub(fingerprint, 33, 40), 16)
  end
  if not block or #fingerprint ~= 40 then bloom_refuse('a fingerprint not of 40 hex digits') end
  local call, c = bits_call(plan, block % plan.blocks)
  local k, m, ops = plan.k, plan.m, call.ops
  plan.call[i], plan.first[i] = c, plan.skip + ops + 1
  call.ops = ops + k
  local args, n, value = call.args, call.n, plan.value
  local x = tonumber(sub(digest, 13, 22), 16) % m
  local y = tonumber(sub(digest, 23, 32), 16) % m
  -- offsets as numbers (Redis formats them: as fast as Lua would), the value as text
  if value then
    for step = 1, k do
      args[n + 1], args[n + 2], args[n + 3], args[n + 4] = 'SET', 'u1', x, value
      n = n + 4
      x = (x + y) % m
      y = (y + step) % m
    end
  else
    for step = 1, k do
      args[n + 1], args[n + 2], args[n + 3] = 'GET', 'u1', x
      n = n + 3
      x = (x + y) % m
      y = (y + step) % m
    end
  end
  call.n = n
end

-- Run the calls of `plan` with `command`: their replies, in the order of the calls.
local function bits_run(plan, command)
  local replies = {}
  for c, call in ipairs(plan.calls) do
    replies[c] = redis.call(command, call.key, unpack(call.args))
  end
  return replies
end

-- Whether the k bits of the i-th fingerprint of `plan` are all 1 in `replies`.
local function bits_all_set(plan, replies, i)
  local values, first = replies[plan.call[i]], plan.first[i]
  for b = first, first + plan.k - 1 do
    if values[b] ~= 1 then return false end
  end
  return true
end

-- Which of `fingerprints` are in an older layer: {[i] = true}.
local function in_older_layers(state, fingerprints)
  local found = {}
  for j = 0, state.layers - 2 do
    local plan = bits_plan(state, j, nil, {})
    for i, fingerprint in ipairs(fingerprints) do
      if not found[i] then bits_add(plan, i, fingerprint) end
    end
    local replies = bits_run(plan, 'BITFIELD_RO')
    for i = 1, #fingerprints do
      if not found[i] and bits_all_set(plan, replies, i) then found[i] = true end
    end
  end
  return found
end

-- Check and set the bits of `fingerprints` (40 hex digits each): whether each is new, in
-- batch order (a fingerprint the batch held before is seen). A fingerprint found in an
-- older layer is seen; the others have their bits set in the newest layer (BITFIELD SET
-- answers the old bits: new if one was 0; each call starts with INCRBY 0 on the block's
-- last bit, which makes the block its full size when it is first written). Counting
-- them and growing the filter is bloom_record()'s.
local function bloom_find_new(state, fingerprints)
  local found = in_older_layers(state, fingerprints)
  local newest = state.layers - 1
  local last = tostring(state.params[5][newest + 1] - 1)
  local plan = bits_plan(state, newest, '1', {'INCRBY', 'u1', last, '0'})
  for i, fingerprint in ipairs(fingerprints) do
    if not found[i] then bits_add(plan, i, fingerprint) end
  end
  local replies = bits_run(plan, 'BITFIELD')
  local new, added = {}, 0
  for i = 1, #fingerprints do
    new[i] = not found[i] and not bits_all_set(plan, replies, i)
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
      'capacity:' .. layers, params[6], 'layer:' .. layers, params[7])
    redis.call('HSET', fkeys[2], state.generation .. ':' .. layers, params[8])
    layers = layers + 1
  end
  return layers, count
end
