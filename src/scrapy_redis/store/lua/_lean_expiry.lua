-- Included (scrapy_redis.store.scripts) by the scripts that record a lean filter's
-- fingerprints that expire (see scrapy_redis/dupefilters/lean_expiry.py): not a script.
-- A fingerprint kept forever is a member of the filter's own bucket; one that expires, a
-- member of its bucket of the generation in which it expires (a window of `span` ms by
-- this server's clock); a generation's buckets expire whole at the end of its window. A
-- generation has fewer buckets than the filter (sized for its share of the capacity) and
-- grows by *parts*: once it holds a part's capacity (its count, field g<generation> of the
-- meta hash), the next batches write to its next part, so its buckets stay intsets.
-- A request's member is {its generation bucket (1-based, among the batch's), its member
-- (the same integer as in the own buckets), its own bucket (1-based, if those are sent)}.
--#include _expiry.lua

-- The filter's keys from KEYS[first]: `config` (msgpack) is {k, span in ms, the longest
-- lifetime in ms, whether the own buckets are sent, how many own buckets O, how many
-- generation buckets B, generations G, {parts of generation k .. k + G}, a part's
-- capacity}; the keys are the filter's meta hash, the O own buckets, then for each
-- generation bucket, for each live generation k .. k + G, its buckets of that
-- generation's parts. The own buckets may hold members if the meta hash counts some
-- (`count`, written without a lifetime) or says so (`forever`, see lean_lifetime_open.lua);
-- they are asked then only. nil (the client is to look again and send again, nothing
-- written) unless k is the live generation by this server's clock (the client's estimate
-- is off: near the end of a window), the own buckets are sent if they may hold members,
-- and every part a live generation has is sent.
local function lean_expiry_open(first, config, now)
  local k, span, gens = tonumber(config[1]), tonumber(config[2]), tonumber(config[7])
  local fields = {'count', 'forever'}
  for g = k, k + gens do
    fields[#fields + 1] = 'g' .. g
  end
  local meta = redis.call('HMGET', KEYS[first], unpack(fields))
  local state = {meta = KEYS[first], live = k, span = span, longest = tonumber(config[3]),
    own = config[4] == 1, gens = gens, cap = math.max(1, tonumber(config[9])),
    ask_own = (tonumber(meta[1]) or 0) > 0 or meta[2] == '1', parts = {}, offsets = {},
    held = {}, first = first + 1, first_gen = first + 1 + tonumber(config[5])}
  if math.floor(now / span) + 1 ~= k or (state.ask_own and not state.own) then
    return nil
  end
  local offset = 0
  for g = 0, gens do
    local sent, held = tonumber(config[8][g + 1]), math.max(0, tonumber(meta[3 + g]) or 0)
    if math.floor(held / state.cap) + 1 > sent then
      return nil
    end
    state.parts[k + g], state.offsets[k + g], state.held[k + g] = sent, offset, held
    offset = offset + sent
  end
  state.per_bucket = offset
  return state
end

local function own_key(state, bucket)
  if not state.own then
    error({err = 'ERR a lean filter batch keeps a fingerprint forever without its bucket'})
  end
  return KEYS[state.first + bucket - 1]
end

local function generation_key(state, bucket, k, part)
  return KEYS[state.first_gen + (bucket - 1) * state.per_bucket + state.offsets[k] + part]
end

-- The generation a fingerprint of `lifetime` ms recorded at `now` goes to (nil: forever).
local function lean_generation(state, lifetime, now)
  lifetime = tonumber(lifetime) or 0
  if lifetime <= 0 then
    return nil
  end
  return math.ceil((now + math.min(lifetime, state.longest)) / state.span)
end

-- Ask `key` about `missing` (members) with SMISMEMBER, 2000 a call: mark those it holds
-- in `alive`; the others, still missing.
local function lean_ask(key, missing, alive)
  local still = {}
  for i = 1, #missing, 2000 do
    local last = math.min(i + 1999, #missing)
    local found = redis.call('SMISMEMBER', key, unpack(missing, i, last))
    for j = 1, #found do
      local member = missing[i + j - 1]
      if found[j] == 1 then
        alive[member] = true
      else
        still[#still + 1] = member
      end
    end
  end
  return still
end

-- Raise WRONGTYPE unless each of `keys` is a set or missing.
local function lean_check_sets(keys)
  for key in pairs(keys) do
    local found = redis.call('TYPE', key)['ok']
    if found ~= 'none' and found ~= 'set' then
      error({err = 'WRONGTYPE ' .. key .. ' holds a ' .. found .. ', not a set (a key of ' ..
        'the lean filter written by hand? delete it)'})
    end
  end
end

-- Ask the own buckets of the requests `group` about their members (when they may hold
-- some): each own bucket once, about all its members.
local function lean_ask_own(state, group, members, alive)
  local by_bucket = {}
  for _, i in ipairs(group) do
    local bucket = members[i][3]
    by_bucket[bucket] = by_bucket[bucket] or {}
    table.insert(by_bucket[bucket], members[i][2])
  end
  for bucket, asked in pairs(by_bucket) do
    lean_ask(own_key(state, bucket), asked, alive)
  end
end

-- The alive members among those of the requests `group` of generation bucket `bucket`:
-- each place asked once, about those not found yet (the own buckets, then the newest
-- generation's parts first). A member asked nowhere (found before) is written nowhere. A
-- generation that counts no fingerprint holds none (every write counts what it adds, a
-- forget takes nothing from the count): it is not asked.
local function lean_alive_of(state, bucket, group, members)
  local alive, missing = {}, {}
  if state.ask_own then
    lean_ask_own(state, group, members, alive)
  end
  for _, i in ipairs(group) do
    local member = members[i][2]
    if alive[member] == nil then
      alive[member] = false
      missing[#missing + 1] = member
    end
  end
  for k = state.live + state.gens, state.live, -1 do
    for part = (state.held[k] > 0 and state.parts[k] or 0) - 1, 0, -1 do
      if #missing == 0 then
        return alive
      end
      missing = lean_ask(generation_key(state, bucket, k, part), missing, alive)
    end
  end
  return alive
end

-- Whether each request is new (see find_new() in _dedup.lua), and the new ones to record
-- (lean_expiry_record()). Every key a new request goes to was read (a generation's
-- bucket) or is checked (an own bucket not asked, a bucket of a generation that counts
-- nothing): a key of another type fails the call before anything is written.
local function lean_expiry_find_new(state, numbers, members, lifetimes, now)
  local groups, unread = {}, {}
  for i, n in ipairs(numbers) do
    if n ~= 0 then
      local bucket = members[i][1]
      groups[bucket] = groups[bucket] or {}
      table.insert(groups[bucket], i)
      local target = lean_generation(state, lifetimes[i], now)
      if not target and not state.ask_own then
        unread[own_key(state, members[i][3])] = true
      elseif target and state.held[target] == 0 then
        unread[generation_key(state, bucket, target, 0)] = true
      end
    end
  end
  local known = {}
  for bucket, group in pairs(groups) do
    known[bucket] = lean_alive_of(state, bucket, group, members)
  end
  lean_check_sets(unread)
  local new, added = {}, {}
  for i, n in ipairs(numbers) do
    if n == 0 then
      new[i] = true
    else
      local alive = known[members[i][1]]
      new[i] = not alive[members[i][2]]
      if new[i] then
        alive[members[i][2]] = true
        added[#added + 1] = i
      end
    end
  end
  return new, added
end

-- Count `added` fingerprints in generation `k`'s field of the meta hash (written whole:
-- a planted value is replaced); once a generation is first written, drop the fields of
-- the generations whose window has ended.
local function lean_count_generation(state, k, added)
  redis.call('HSET', state.meta, 'g' .. k, state.held[k] + added)
  if state.held[k] > 0 then
    return
  end
  for _, field in ipairs(redis.call('HKEYS', state.meta)) do
    local old = tonumber(string.match(field, '^g(%d+)$'))
    if old and old < state.live then
      redis.call('HDEL', state.meta, field)
    end
  end
end

-- Record the requests lean_expiry_find_new() left to record, each where its lifetime
-- (`lifetimes[i]`, ms, 0: forever; cut to the longest) puts it (in its generation, the
-- part being filled), one SADD per key; let each generation bucket written expire at the
-- end of its window; count them per generation; and say in the meta hash that the own
-- buckets hold members once one is kept forever.
local function lean_expiry_record(state, added, members, lifetimes, now)
  local groups, ends, counts, kept = {}, {}, {}, false
  for _, i in ipairs(added) do
    local target = lean_generation(state, lifetimes[i], now)
    local key
    if target then
      local part = math.floor(state.held[target] / state.cap)
      key = generation_key(state, members[i][1], target, part)
      ends[key] = target * state.span
      counts[target] = (counts[target] or 0) + 1
    else
      key, kept = own_key(state, members[i][3]), true
    end
    groups[key] = groups[key] or {}
    table.insert(groups[key], members[i][2])
  end
  for key, group in pairs(groups) do
    call_in_chunks('SADD', key, group)
  end
  for key, at in pairs(ends) do
    redis.call('PEXPIREAT', key, at)
  end
  for k, count in pairs(counts) do
    lean_count_generation(state, k, count)
  end
  if kept and not state.ask_own then
    redis.call('HSET', state.meta, 'forever', 1)
  end
end
