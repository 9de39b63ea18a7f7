-- Included (scrapy_redis.store.scripts) by the scripts that record a lean filter's
-- fingerprints that expire (see scrapy_redis/dupefilters/lean_expiry.py): not a script.
-- A fingerprint kept forever is a member of the filter's own bucket; one that expires, a
-- member of its bucket of the generation in which it expires (a window of `span` ms by
-- this server's clock); a generation's buckets expire whole at the end of its window.
-- A request's member is {its bucket (1-based, among the batch's buckets), its member
-- there}: a generation's buckets are cut like the filter's own (the same bits).
--#include _expiry.lua

-- The filter's keys from KEYS[first]: `config` (msgpack) is {k, span in ms, the longest
-- lifetime in ms, how many buckets B, generations G, whether the own buckets are sent};
-- the keys are the filter's meta hash, the B own buckets (if sent), then for each bucket
-- G + 1 keys: its buckets of the live generations k .. k + G. The own buckets may hold
-- members if the meta hash counts some (`count`, written without a lifetime) or says so
-- (`forever`, see lean_lifetime_open.lua); they are asked then only. nil (the client is to
-- look again and send again, nothing written) unless k is the live generation by this
-- server's clock (the client's estimate is off: near the end of a window) and the own
-- buckets are sent if they may hold members.
local function lean_expiry_open(first, config, now)
  local k, span = tonumber(config[1]), tonumber(config[2])
  local meta = redis.call('HMGET', KEYS[first], 'count', 'forever')
  local state = {first = first + 1, live = k, span = span, longest = tonumber(config[3]),
    buckets = tonumber(config[4]), gens = tonumber(config[5]), own = config[6] == 1,
    meta = KEYS[first], ask_own = (tonumber(meta[1]) or 0) > 0 or meta[2] == '1'}
  if math.floor(now / span) + 1 ~= k or (state.ask_own and not state.own) then
    return nil
  end
  return state
end

local function own_key(state, bucket)
  if not state.own then
    error({err = 'ERR a lean filter batch keeps a fingerprint forever without its bucket'})
  end
  return KEYS[state.first + bucket - 1]
end

local function generation_key(state, bucket, k)
  local first = state.first + (state.own and state.buckets or 0)
  return KEYS[first + (bucket - 1) * (state.gens + 1) + (k - state.live)]
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

-- Per bucket of the batch, the requests asked (`numbers[i]` 0: not asked).
local function lean_groups(numbers, members)
  local groups = {}
  for i, n in ipairs(numbers) do
    if n ~= 0 then
      local bucket = members[i][1]
      groups[bucket] = groups[bucket] or {}
      table.insert(groups[bucket], i)
    end
  end
  return groups
end

-- Raise WRONGTYPE unless each of `keys` is a set or missing.
local function lean_check_sets(keys)
  for _, key in ipairs(keys) do
    local found = redis.call('TYPE', key)['ok']
    if found ~= 'none' and found ~= 'set' then
      error({err = 'WRONGTYPE ' .. key .. ' holds a ' .. found .. ', not a set (a key of ' ..
        'the lean filter written by hand? delete it)'})
    end
  end
end

-- Whether the one request of its bucket is alive in a place it may be (the own bucket,
-- the live generations) but the one it goes to (`target`: SADD there answers for that
-- one, see lean_write_one()).
local function lean_one_alive(state, bucket, member, target)
  if target and state.ask_own and redis.call('SISMEMBER', own_key(state, bucket), member) == 1 then
    return true
  end
  for k = state.live + state.gens, state.live, -1 do
    if k ~= target and redis.call('SISMEMBER', generation_key(state, bucket, k), member) == 1 then
      return true
    end
  end
  return false
end

-- Record the one request of its bucket in `key`, its place (checked before: this cannot
-- fail): whether it is new there; a generation's bucket expires with its window.
local function lean_write_one(state, key, member, target)
  if redis.call('SADD', key, member) == 0 then
    return false
  end
  if target then
    redis.call('PEXPIREAT', key, target * state.span)
  end
  return true
end

-- The alive members among those of the requests `group` of `bucket` (several: each place
-- asked once, about those not found yet, newest generation first).
local function lean_alive_of(state, bucket, group, members)
  local alive, missing = {}, {}
  for _, i in ipairs(group) do
    local member = members[i][2]
    if alive[member] == nil then
      alive[member] = false
      missing[#missing + 1] = member
    end
  end
  if state.ask_own then
    missing = lean_ask(own_key(state, bucket), missing, alive)
  end
  for k = state.live + state.gens, state.live, -1 do
    if #missing == 0 then
      break
    end
    missing = lean_ask(generation_key(state, bucket, k), missing, alive)
  end
  return alive
end

-- The one requests of their buckets not alive elsewhere, each {i, its place, its
-- generation}; and the keys to write that were not read (their places; the own buckets
-- if sent but not asked: lean_expiry_record() may keep a request forever there).
local function lean_ones(state, groups, members, lifetimes, now)
  local ones, unread = {}, {}
  for bucket, group in pairs(groups) do
    local i = group[1]
    local target = #group == 1 and lean_generation(state, lifetimes[i], now)
    if #group == 1 and not lean_one_alive(state, bucket, members[i][2], target) then
      local key = target and generation_key(state, bucket, target) or own_key(state, bucket)
      ones[#ones + 1], unread[#unread + 1] = {i, key, target}, key
    end
    if state.own and not state.ask_own then
      unread[#unread + 1] = own_key(state, bucket)
    end
  end
  return ones, unread
end

-- Whether each request is new (see find_new() in _dedup.lua), and the new ones to record
-- (lean_expiry_record()). Every place is read, and every key to write that was not read
-- is checked, before the one request of its bucket is recorded (at once, with SADD, which
-- answers for it): a key of another type fails the call before anything is written.
local function lean_expiry_find_new(state, numbers, members, lifetimes, now)
  local new, added, known = {}, {}, {}
  state.ends, state.kept = {}, false
  local groups = lean_groups(numbers, members)
  for bucket, group in pairs(groups) do
    if #group > 1 then
      known[bucket] = lean_alive_of(state, bucket, group, members)
    else
      new[group[1]] = false  -- unless lean_ones() finds it not alive elsewhere
    end
  end
  local ones, unread = lean_ones(state, groups, members, lifetimes, now)
  lean_check_sets(unread)
  for _, one in ipairs(ones) do
    local i = one[1]
    new[i] = lean_write_one(state, one[2], members[i][2], one[3])
    state.kept = state.kept or (new[i] and not one[3])
  end
  for i, n in ipairs(numbers) do
    if n == 0 then
      new[i] = true
    elseif new[i] == nil then
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

-- Record the requests lean_expiry_find_new() left to record, each where its lifetime
-- (`lifetimes[i]`, ms, 0: forever; cut to the longest) puts it, one SADD per key; let each
-- generation bucket written expire at the end of its window; and say in the meta hash that
-- the own buckets hold members once one is kept forever.
local function lean_expiry_record(state, added, members, lifetimes, now)
  local groups = {}
  for _, i in ipairs(added) do
    local bucket = members[i][1]
    local target = lean_generation(state, lifetimes[i], now)
    local key
    if target then
      key = generation_key(state, bucket, target)
      state.ends[key] = target * state.span
    else
      key, state.kept = own_key(state, bucket), true
    end
    groups[key] = groups[key] or {}
    table.insert(groups[key], members[i][2])
  end
  for key, group in pairs(groups) do
    call_in_chunks('SADD', key, group)
  end
  for key, at in pairs(state.ends) do
    redis.call('PEXPIREAT', key, at)
  end
  if state.kept and not state.ask_own then
    redis.call('HSET', state.meta, 'forever', 1)
  end
end
