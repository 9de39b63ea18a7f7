-- Included (scrapy_redis.store.scripts) by the scripts that dedup and push a batch: not a script.
--#include _chunks.lua
--#include _bloom.lua
--#include _redisbloom.lua
--#include _expiry.lua
--#include _lean_expiry.lua
--#include _bloom_expiry.lua
--#include _redisbloom_expiry.lua

-- Fail before writing anything unless each key is missing or of the type wanted for it:
-- `wanted` is a list of {key, type}. A queue key left by another queue class (a persisted
-- crawl restarted with another SCHEDULER_QUEUE_CLASS) would fail half-way otherwise.
local function check_types(wanted)
  for _, pair in ipairs(wanted) do
    local found = redis.call('TYPE', pair[1])['ok']
    if found ~= 'none' and found ~= pair[2] then
      error({err = 'WRONGTYPE ' .. pair[1] .. ' holds a ' .. found .. ', not a ' .. pair[2] ..
        ' (SCHEDULER_QUEUE_CLASS or SCHEDULER_DUPEFILTER_KEY changed on kept data?)'})
    end
  end
end

-- The fingerprints of a batch as set members: `sets` is the list of set keys, and the i-th
-- request's fingerprint is member `members[i]` of set `sets[numbers[i]]` (number 0: a
-- dont_filter request, always new and never recorded). One filter keeps every fingerprint
-- in one set (hex members); another buckets them into many small sets (integer members).

-- Whether each request is new, as a table of booleans; per set number the new members
-- (record_new() records them once the new requests are pushed: one SMISMEMBER per set
-- and 2000 members, then one SADD, not a call each); and the sets whose one member of
-- the batch is recorded already. A fingerprint the batch holds twice is new the first
-- time. A set asked about one member (most buckets of a filter of many small sets) is
-- asked with SADD, which answers and records in one call, after every other set was
-- read; should one of those SADDs fail (a key of another type: buckets are not checked
-- one by one), the members the others added are removed before the error is raised, so
-- the call writes nothing.
local function find_new(sets, numbers, members)
  local asked = {}
  for i, n in ipairs(numbers) do
    if n ~= 0 then
      asked[n] = asked[n] or {}
      table.insert(asked[n], members[i])
    end
  end
  local known, done = {}, {}
  for n, group in pairs(asked) do
    known[n] = {}
    if #group == 1 then
      done[n] = true
    end
    for i = 1, (done[n] and 0 or #group), 2000 do
      local last = math.min(i + 1999, #group)
      local found = redis.call('SMISMEMBER', sets[n], unpack(group, i, last))
      for j = 1, #found do
        known[n][group[i + j - 1]] = found[j] == 1
      end
    end
  end
  local added_early = {}
  for n in pairs(done) do
    local member = asked[n][1]
    local reply = redis.pcall('SADD', sets[n], member)
    if type(reply) == 'table' and reply.err then
      for _, pair in ipairs(added_early) do redis.call('SREM', pair[1], pair[2]) end
      return error(reply)
    end
    known[n][member] = reply == 0
    if reply == 1 then added_early[#added_early + 1] = {sets[n], member} end
  end
  local new, added = {}, {}
  for i, n in ipairs(numbers) do
    if n == 0 then
      new[i] = true
    elseif known[n][members[i]] then
      new[i] = false
    else
      new[i] = true
      known[n][members[i]] = true
      added[n] = added[n] or {}
      table.insert(added[n], members[i])
    end
  end
  return new, added, done
end

-- Record the members find_new() found (but in the sets it recorded in already), after
-- the push: a push that fails leaves them unrecorded, so sending the batch again is not
-- refused as duplicates (Redis does not undo a script's writes made before an error).
-- The sets of one member each were recorded by find_new(): the queue's keys were checked
-- before it (check_types()), so the push cannot fail on them.
local function record_new(sets, added, done)
  for n, group in pairs(added) do
    if not done[n] then
      call_in_chunks('SADD', sets[n], group)
    end
  end
end

-- Add the number of members record_new() recorded to the field `count` of the hash
-- `counter` (nil: the filter keeps no count).
local function count_new(counter, added)
  if not counter then
    return
  end
  local total = 0
  for _, group in pairs(added) do
    total = total + #group
  end
  if total > 0 then
    redis.call('HINCRBY', counter, 'count', total)
  end
end

-- The sets KEYS[first..], and the counter hash: the last key if `counted` is '1'.
local function sets_and_counter(first, counted)
  local sets = keys_from(first)
  local counter = nil
  if counted == '1' then
    counter = table.remove(sets)
  end
  return sets, counter
end

-- {key, 'set'} for the one set of `sets`, to check with check_types() (a key of another
-- type where the one set of fingerprints goes is a setting changed on kept data). Many
-- small sets are the buckets of one filter, under its own key names: not checked (a call
-- each would cost more than asking them).
local function set_types(sets)
  if #sets == 1 then
    return {{sets[1], 'set'}}
  end
  return {}
end

-- "1" for each new request, "0" for each duplicate: one string for the client to read.
local function flags(new)
  local result = {}
  for i, is_new in ipairs(new) do
    result[i] = is_new and '1' or '0'
  end
  return table.concat(result)
end

-- Tell idle workers on `channel` ('' = nobody to tell) that `pushed` requests were pushed,
-- with `command`: PUBLISH, or on a Redis Cluster SPUBLISH (a sharded channel, in the slot
-- of the script's keys: see news_channel() in keys.py).
local function announce(channel, command, pushed)
  if pushed > 0 and channel ~= '' then
    -- refused (an ACL without the channel, SPUBLISH on Redis < 7): no news, polling finds them
    redis.pcall(command, channel, pushed)
  end
end

-- A RedisBloom filter (KEYS[first]) as a push script's filter (see open_filter()): the
-- members of the batch are the fingerprints. BF.INSERT sets their bits in find_new(),
-- after the queue's keys were checked: the push that follows cannot fail on them.
local function open_redisbloom(first, params)
  local key = KEYS[first]
  return {
    types = {{key, 'MBbloom--'}},
    find_new = function(numbers, members)
      local asked = {}
      for i, n in ipairs(numbers) do
        if n ~= 0 then asked[#asked + 1] = members[i] end
      end
      local answers = redisbloom_insert(key, cmsgpack.unpack(params), asked)
      local new, next_answer = {}, 1
      for i, n in ipairs(numbers) do
        if n == 0 then
          new[i] = true
        else
          new[i] = answers[next_answer]
          next_answer = next_answer + 1
        end
      end
      return new
    end,
    record = function() end,
  }
end

-- A filter of fingerprints that expire (KEYS[first], a sorted set: see _expiry.lua) as a
-- push script's filter (see open_filter()): `params` is the msgpack array of the batch's
-- lifetimes in ms (one per request, 0: forever), `sweep` how many expired fingerprints to
-- remove at least. The members of the batch are the fingerprints; they are recorded after
-- the push, as a set filter's.
local function open_expiring(first, params, sweep)
  local key = KEYS[first]
  local lifetimes = cmsgpack.unpack(params)
  local now = server_ms()
  local added
  return {
    types = {{key, 'zset'}},
    find_new = function(numbers, members)
      local new
      new, added = expiry_find_new(key, numbers, members, lifetimes, now)
      return new
    end,
    record = function()
      expiry_record(key, added, now, tonumber(sweep))
    end,
  }
end

-- The state of a filter whose fingerprints expire, opened by `open` (lean_expiry_open(),
-- bloom_expiry_open() or redisbloom_expiry_open(): KEYS[first..], its msgpack `config`,
-- the server's clock), with the batch's lifetimes (`params`, msgpack) and that clock (ms):
-- state, lifetimes, now; state nil if the client's view of the filter is stale.
local function expiring_state(open, first, params, config)
  local lifetimes = cmsgpack.unpack(params)
  local now = server_ms()
  return open(first, cmsgpack.unpack(config), now), lifetimes, now
end

-- A lean filter whose fingerprints expire (see _lean_expiry.lua) as a push script's
-- filter: `params` is the msgpack array of the batch's lifetimes in ms (one per request,
-- 0: forever), `config` its config (see lean_expiry_open()); the members of the batch
-- are as _lean_expiry.lua says. Recorded after the push, as a set filter's (but for the
-- one request of its bucket: recorded at once, as find_new() does).
local function open_lean_expiring(first, params, config)
  local state, lifetimes, now = expiring_state(lean_expiry_open, first, params, config)
  if not state then
    return nil
  end
  local added, asked
  return {
    types = {},
    find_new = function(numbers, members)
      local new
      asked = members
      new, added = lean_expiry_find_new(state, numbers, members, lifetimes, now)
      return new
    end,
    record = function()
      lean_expiry_record(state, added, asked, lifetimes, now)
    end,
  }
end

-- A Bloom filter whose fingerprints expire (see _bloom_expiry.lua) as a push script's
-- filter, made by the function this returns for its `open` and `find_new` (the Bloom
-- bits' or RedisBloom's, see _redisbloom_expiry.lua): `params` is the msgpack array of the
-- batch's lifetimes in ms (one per request, 0: the longest), `config` its config (see
-- bloom_expiry_open()); the members of the batch are the fingerprints (40 hex digits).
-- Their bits are set by find_new(), as a Bloom filter's (the queue's keys were checked
-- before: the push cannot fail on them). nil (the push answers "stale") if the client's
-- clock estimate is off.
local function bloom_expiring(open, find_new)
  return function(first, params, config)
    local state, lifetimes, now = expiring_state(open, first, params, config)
    if not state then
      return nil
    end
    return {
      types = {},
      find_new = function(numbers, members)
        return find_new(state, numbers, members, lifetimes, now)
      end,
      record = function() end,
    }
  end
end

local open_bloom_expiring = bloom_expiring(bloom_expiry_open, bloom_expiry_find_new)
local open_redisbloom_expiring = bloom_expiring(redisbloom_expiry_open, redisbloom_expiry_find_new)

-- The duplicate filter of a push script, whose keys are KEYS[first..]: `mode` is '0'
-- (sets), '1' (sets, then the count hash), 'expire' (a sorted set of fingerprints that
-- expire, with the batch's lifetimes as `params` and the sweep count as `blocks`: see
-- open_expiring()), 'lean_expire' (a lean filter's fingerprints that expire: see
-- open_lean_expiring()), 'bloom_expire' (a Bloom filter's fingerprints that expire: see
-- open_bloom_expiring()), 'redisbloom_expire' (the same on RedisBloom: see
-- open_redisbloom_expiring()), 'bloom' (a Bloom filter: see _bloom.lua,
-- with its `params` and the batch's `blocks`; the members are the fingerprints) or
-- 'redisbloom' (a RedisBloom filter, with its `params`: see _redisbloom.lua). nil if
-- the client's view of the Bloom filter, or of the lean filter's generations, is stale
-- (nothing is done: it looks at the filter again and sends again). Otherwise a table:
--   types: {key, type} pairs for check_types();
--   find_new(numbers, members): whether each request is new (see find_new()); a Bloom
--     filter answers for the first ones only, as many as its newest layer has room for
--     (the client sends the others again, to the layer added for them);
--   record(): once the new requests are pushed, record the new fingerprints found (sets)
--     or count them (a Bloom filter's bits are set by find_new(): the queue's keys were
--     checked before, so the push that follows cannot fail on them).
local function open_filter(first, mode, params, blocks)
  if mode == 'redisbloom' then
    return open_redisbloom(first, params)
  end
  if mode == 'expire' then
    return open_expiring(first, params, blocks)
  end
  if mode == 'lean_expire' then
    return open_lean_expiring(first, params, blocks)
  end
  if mode == 'bloom_expire' then
    return open_bloom_expiring(first, params, blocks)
  end
  if mode == 'redisbloom_expire' then
    return open_redisbloom_expiring(first, params, blocks)
  end
  if mode ~= 'bloom' then
    local sets, counter = sets_and_counter(first, mode)
    local added, done
    return {
      types = set_types(sets),
      find_new = function(numbers, members)
        local new
        new, added, done = find_new(sets, numbers, members)
        return new
      end,
      record = function()
        record_new(sets, added, done)
        count_new(counter, added)
      end,
    }
  end
  local state = bloom_state(keys_from(first), cmsgpack.unpack(params), cmsgpack.unpack(blocks))
  if not state then
    return nil
  end
  local found
  return {
    types = {},
    find_new = function(numbers, members)
      -- the requests up to the last fingerprint the newest layer has room for
      local n, fingerprints = 0, {}
      for i = 1, #numbers do
        if numbers[i] ~= 0 then
          if #fingerprints == state.room then break end
          fingerprints[#fingerprints + 1] = members[i]
        end
        n = i
      end
      local checked
      checked, found = bloom_find_new(state, fingerprints)
      local new, next_checked = {}, 1
      for i = 1, n do
        if numbers[i] == 0 then
          new[i] = true
        else
          new[i] = checked[next_checked]
          next_checked = next_checked + 1
        end
      end
      return new
    end,
    record = function()
      bloom_record(state, found)
    end,
  }
end
