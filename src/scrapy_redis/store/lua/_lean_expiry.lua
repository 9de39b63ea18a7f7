-- Included (scrapy_redis.store.scripts) by the scripts that record a lean filter's
-- fingerprints that expire (see scrapy_redis/dupefilters/lean_expiry.py): not a script.
-- A fingerprint kept forever is a member of the filter's own bucket; one that expires, a
-- member of its bucket of the generation in which it expires (a window of `span` ms by
-- this server's clock); a generation's buckets expire whole at the end of its window.
-- A request's member is {its bucket (1-based, among the batch's own buckets), its member
-- there, its generation bucket (1-based, among the batch's), its member there}.
--#include _expiry.lua

-- The filter's keys from KEYS[first]: `config` (msgpack) is {k0, span in ms, the longest
-- lifetime in ms, how many own buckets F, generations G}; the keys are the F own buckets,
-- then for each generation bucket G + 3 keys, generations k0 .. k0 + G + 2. Fails (nothing
-- written) unless the live generations are among them (the client's clock is off).
local function lean_expiry_open(first, config, now)
  local k0, span = tonumber(config[1]), tonumber(config[2])
  local live = math.floor(now / span) + 1
  if live < k0 or live > k0 + 2 then
    error({err = 'ERR the lean filter was sent generations from ' .. k0 .. ' at ' .. now ..
      ' ms (server clock), not the live ones: its clock estimate is off; send again'})
  end
  return {first = first, k0 = k0, span = span, longest = tonumber(config[3]),
    own = tonumber(config[4]), gens = tonumber(config[5]), live = live}
end

local function generation_key(state, bucket, k)
  local width = state.gens + 3
  return KEYS[state.first + state.own + (bucket - 1) * width + (k - state.k0)]
end

-- Whether the request of `member` is recorded and alive.
local function lean_alive(state, member)
  if redis.call('SISMEMBER', KEYS[state.first + member[1] - 1], member[2]) == 1 then
    return true
  end
  for k = state.live, state.live + state.gens do
    if redis.call('SISMEMBER', generation_key(state, member[3], k), member[4]) == 1 then
      return true
    end
  end
  return false
end

-- Whether each request is new (see find_new() in _dedup.lua), and the new ones' numbers.
local function lean_expiry_find_new(state, numbers, members)
  local new, added, known = {}, {}, {}
  for i, n in ipairs(numbers) do
    if n == 0 then
      new[i] = true
    else
      local member = members[i]
      local id = member[1] .. ':' .. member[2]
      new[i] = not (known[id] or lean_alive(state, member))
      if new[i] then
        known[id] = true
        added[#added + 1] = i
      end
    end
  end
  return new, added
end

-- Record the requests lean_expiry_find_new() found new, each where its lifetime
-- (`lifetimes[i]`, ms, 0: forever; cut to the longest) puts it, and let each generation
-- bucket written expire at the end of its window.
local function lean_expiry_record(state, added, members, lifetimes, now)
  local ends = {}
  for _, i in ipairs(added) do
    local member = members[i]
    local lifetime = tonumber(lifetimes[i]) or 0
    if lifetime <= 0 then
      redis.call('SADD', KEYS[state.first + member[1] - 1], member[2])
    else
      local k = math.ceil((now + math.min(lifetime, state.longest)) / state.span)
      local key = generation_key(state, member[3], k)
      redis.call('SADD', key, member[4])
      ends[key] = k * state.span
    end
  end
  for key, at in pairs(ends) do
    redis.call('PEXPIREAT', key, at)
  end
end
