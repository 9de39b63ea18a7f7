-- Included (scrapy_redis.store.scripts) by the scripts that check and record fingerprints
-- that expire in a Bloom filter on RedisBloom (DUPEFILTER_LIFETIME with
-- BLOOMFILTER_BACKEND, see scrapy_redis/dupefilters/bloom_expiry.py): not a script.
-- The time generations of _bloom_expiry.lua, each a RedisBloom filter (BF.INSERT makes it,
-- scaling, with the given capacity, error rate and expansion) that expires whole at the
-- end of its window. A fingerprint is seen if one live generation holds it (BF.MEXISTS).
--#include _bloom_expiry.lua
--#include _redisbloom.lua

-- The filter's keys from KEYS[first]: `config` (msgpack) is {k0, span in ms, the longest
-- lifetime in ms, generations G, capacity, error rate, expansion}; the keys are the
-- generations k0 .. k0 + G + 2. nil (nothing written: the caller answers "stale") unless
-- the live generations are among them (the client's clock is off); fails unless the keys
-- are as many.
local function redisbloom_expiry_open(first, config, now)
  local k0, span = tonumber(config[1]), tonumber(config[2])
  local live = math.floor(now / span) + 1
  if live < k0 or live > k0 + 2 then
    return nil  -- the client's clock estimate is off: it reads the clock, sends again
  end
  local gens = tonumber(config[4])
  if #KEYS - first + 1 ~= gens + 3 then
    bloom_refuse(#KEYS - first + 1 .. ' keys for ' .. gens + 3 .. ' generations')
  end
  return {first = first, k0 = k0, span = span, longest = tonumber(config[3]), gens = gens,
    live = live, params = {config[5], config[6], config[7]}}
end

-- Which requests a live generation other than their own target holds: {[i] = true}.
local function redisbloom_found_elsewhere(state, members, targets)
  local found = {}
  for k = state.live, state.live + state.gens do
    local key = KEYS[state.first + k - state.k0]
    if redis.call('EXISTS', key) == 1 then
      local asked = asked_in(targets, found, k)
      for from = 1, #asked, 1000 do
        local items = {}
        for j = from, math.min(from + 999, #asked) do items[#items + 1] = members[asked[j]] end
        local exists = redis.call('BF.MEXISTS', key, unpack(items))
        for j, value in ipairs(exists) do
          if value == 1 then found[asked[from + j - 1]] = true end
        end
      end
    end
  end
  return found
end

-- Whether each request is new (see bloom_expiry_find_new(); `members[i]` the fingerprint
-- as RedisBloom takes it): checked in every live generation, inserted in its own (which
-- expires at the end of its window).
local function redisbloom_expiry_find_new(state, numbers, members, lifetimes, now)
  local targets, new = batch_targets(state, numbers, members, lifetimes, now)
  local found = redisbloom_found_elsewhere(state, members, targets)
  local groups, order = by_target(numbers, targets, found)
  for _, k in ipairs(order) do
    local key, group = KEYS[state.first + k - state.k0], groups[k]
    local items = {}
    for j, i in ipairs(group) do items[j] = members[i] end
    local answers = redisbloom_insert(key, state.params, items)
    for j, i in ipairs(group) do new[i] = answers[j] end
    redis.call('PEXPIREAT', key, k * state.span)
  end
  return new
end
