-- Included (scrapy_redis.store.scripts) by the scripts that check and record a Bloom
-- filter's fingerprints that expire (DUPEFILTER_LIFETIME, see
-- scrapy_redis/dupefilters/bloom_expiry.py): not a script.
-- Time is cut into windows of `span` ms by this server's clock; a fingerprint of lifetime
-- L recorded at `now` has its bits set in the generation of window ceil((now + L) / span)
-- (L cut to the longest; 0, forever, is the longest too). A generation is one fixed Bloom
-- layer (the layout of layer 0 in _bloom.lua: the block from digits 1-12, the bits from
-- digits 13-32) of blocks (strings) and a count (a string), all of which expire at the
-- end of its window: Redis drops it whole. A fingerprint is seen if one live generation
-- (windows live .. live + G) holds it.
--#include _bloom.lua
--#include _expiry.lua

-- The filter's keys from KEYS[first]: `config` (msgpack) is {k0, span in ms, the longest
-- lifetime in ms, generations G, k, blocks per generation, bits per block, the block
-- numbers of the batch}; the keys are, for each generation k0 .. k0 + G + 2, its count,
-- then its blocks in the order of the block numbers. nil (nothing written: the caller
-- answers "stale") unless the live generations are among them (the client's clock is
-- off); fails unless the keys are as many.
local function bloom_expiry_open(first, config, now)
  local k0, span = tonumber(config[1]), tonumber(config[2])
  local live = math.floor(now / span) + 1
  if live < k0 or live > k0 + 2 then
    return nil  -- the client's clock estimate is off: it reads the clock, sends again
  end
  local gens, numbers = tonumber(config[4]), config[8]
  local width = #numbers + 1
  if #KEYS - first + 1 ~= (gens + 3) * width then
    bloom_refuse(#KEYS - first + 1 .. ' keys for ' .. gens + 3 .. ' generations of ' ..
      #numbers .. ' blocks')
  end
  return {first = first, k0 = k0, span = span, longest = tonumber(config[3]), gens = gens,
    live = live, width = width, numbers = numbers,
    params = {nil, nil, {tonumber(config[5])}, {tonumber(config[6])}, {tonumber(config[7])}}}
end

-- The count key of generation `k`.
local function generation_count_key(state, k)
  return KEYS[state.first + (k - state.k0) * state.width]
end

-- A plan of BITFIELD calls (see bits_plan() in _bloom.lua) on the blocks of generation `k`.
local function generation_plan(state, k, value, head)
  local named, base = {}, state.first + (k - state.k0) * state.width
  for n, block in ipairs(state.numbers) do
    named[block] = KEYS[base + n]
  end
  return bits_plan({params = state.params, named = {named}}, 0, value, head)
end

-- The generation each fingerprint goes to, by its lifetime (ms, 0: forever, cut to the
-- longest), indexed like `numbers`.
local function generation_targets(state, numbers, lifetimes, now)
  local targets = {}
  for i, n in ipairs(numbers) do
    if n ~= 0 then
      local lifetime = tonumber(lifetimes[i]) or 0
      if lifetime <= 0 or lifetime > state.longest then lifetime = state.longest end
      targets[i] = math.ceil((now + lifetime) / state.span)
    end
  end
  return targets
end

-- The generation each request goes to (generation_targets()), none for a fingerprint
-- the batch holds twice (seen the second time), and whether each is new so far (a
-- dont_filter request, `numbers[i]` 0, is: not recorded). `check(member)`, if given,
-- refuses a member it cannot take. (Both backends' find_new.)
local function batch_targets(state, numbers, members, lifetimes, now, check)
  local targets = generation_targets(state, numbers, lifetimes, now)
  local first_of, new = {}, {}
  for i, n in ipairs(numbers) do
    new[i] = n == 0
    if n ~= 0 then
      local member = members[i]
      if check then check(member) end
      if first_of[member] then targets[i] = nil else first_of[member] = i end
    end
  end
  return targets, new
end

-- The requests to look for in live generation `k`: not found yet, another target.
local function asked_in(targets, found, k)
  local asked = {}
  for i in pairs(targets) do
    if targets[i] ~= k and not found[i] then asked[#asked + 1] = i end
  end
  return asked
end

-- The requests to record, by target generation ({[k] = {i, ...}}), and the generations
-- in the order first met: those with a target and found in no other live generation.
local function by_target(numbers, targets, found)
  local groups, order = {}, {}
  for i in ipairs(numbers) do
    local k = targets[i]
    if k and not found[i] then
      if not groups[k] then groups[k] = {}; order[#order + 1] = k end
      table.insert(groups[k], i)
    end
  end
  return groups, order
end

-- Which requests are held by a live generation other than their own target: {[i] = true}.
-- A generation without its count key was never written (or expired): not read.
local function found_elsewhere(state, numbers, members, targets)
  local found = {}
  for k = state.live, state.live + state.gens do
    if redis.call('EXISTS', generation_count_key(state, k)) == 1 then
      local plan, asked = generation_plan(state, k, nil, {}), asked_in(targets, found, k)
      for _, i in ipairs(asked) do bits_add(plan, i, members[i]) end
      local replies = bits_run(plan, 'BITFIELD_RO')
      for _, i in ipairs(asked) do
        if bits_all_set(plan, replies, i) then found[i] = true end
      end
    end
  end
  return found
end

-- Raise WRONGTYPE unless `key` (a generation's block) is missing or a string.
local function check_generation_block(key)
  local found = redis.call('TYPE', key)['ok']
  if found ~= 'none' and found ~= 'string' then
    error({err = 'WRONGTYPE ' .. key .. ' holds a ' .. found .. ', not a string (a key of ' ..
      'the Bloom filter written by hand? delete it)'})
  end
end

-- Set the bits of the requests not found elsewhere in their target generations (BITFIELD
-- SET answers the old bits: new if one was 0; each call starts with INCRBY 0 on the
-- block's last bit, which makes the block its full size when first written), count the
-- new ones and let every key written expire at the end of its window. Every block to
-- write is checked first: a generation that fails must fail before another is written.
local function set_in_targets(state, numbers, members, targets, found, new)
  local groups, order = by_target(numbers, targets, found)
  local plans, last = {}, tostring(state.params[5][1] - 1)
  for _, k in ipairs(order) do
    plans[k] = generation_plan(state, k, '1', {'INCRBY', 'u1', last, '0'})
    for _, i in ipairs(groups[k]) do bits_add(plans[k], i, members[i]) end
  end
  for _, k in ipairs(order) do
    for _, call in ipairs(plans[k].calls) do check_generation_block(call.key) end
  end
  for _, k in ipairs(order) do
    local plan, at, added = plans[k], k * state.span, 0
    local replies = bits_run(plan, 'BITFIELD')
    for i in pairs(plan.call) do
      new[i] = not bits_all_set(plan, replies, i)
      if new[i] then added = added + 1 end
    end
    for _, call in ipairs(plan.calls) do redis.call('PEXPIREAT', call.key, at) end
    local count = generation_count_key(state, k)
    local counted = redis.pcall('INCRBY', count, added)
    if type(counted) == 'table' and counted.err then  -- not a count (planted by hand)
      redis.call('SET', count, added)
    end
    redis.call('PEXPIREAT', count, at)
  end
end

-- Whether each request is new (`numbers[i]` 0: a dont_filter request, new and not
-- recorded; `members[i]` the i-th fingerprint as 40 hex digits; `lifetimes[i]` its
-- lifetime in ms): checked in every live generation and recorded in its own, at once.
local function bloom_expiry_find_new(state, numbers, members, lifetimes, now)
  local targets, new = batch_targets(state, numbers, members, lifetimes, now, function(member)
    if #member ~= 40 then bloom_refuse('a fingerprint not of 40 hex digits') end
  end)
  local found = found_elsewhere(state, numbers, members, targets)
  set_in_targets(state, numbers, members, targets, found, new)
  return new
end
