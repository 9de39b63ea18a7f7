-- Included (scrapy_redis.store.scripts) by the scripts that record fingerprints that
-- expire: not a script. Such a filter is one sorted set: member = the fingerprint, score =
-- when it expires, in ms by this server's clock ('+inf': never). A fingerprint whose time
-- has come is as good as absent (a request with it is new again); the writes remove the
-- expired ones, a bounded number each, and the set expires whole with its last one.
--#include _chunks.lua

-- This server's clock, in ms.
local function server_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

-- Whether a score read with ZMSCORE (false: absent) is alive at `now`.
local function alive(score, now)
  if not score then
    return false
  end
  if score == 'inf' or score == '+inf' then
    return true
  end
  local at = tonumber(score)
  return at ~= nil and at > now
end

-- Whether each request is new, and the {score, member} pairs to record (see find_new() in
-- _dedup.lua for `numbers` and `members`); `lifetimes[i]`: the i-th request's lifetime in
-- ms (0: forever). A fingerprint the batch holds twice is new the first time.
local function expiry_find_new(key, numbers, members, lifetimes, now)
  local asked = {}
  for i, n in ipairs(numbers) do
    if n ~= 0 then
      asked[#asked + 1] = members[i]
    end
  end
  local known = {}
  for i = 1, #asked, 2000 do
    local last = math.min(i + 1999, #asked)
    local scores = redis.call('ZMSCORE', key, unpack(asked, i, last))
    for j = 1, #scores do
      known[asked[i + j - 1]] = alive(scores[j], now)
    end
  end
  local new, added = {}, {}
  for i, n in ipairs(numbers) do
    if n == 0 then
      new[i] = true
    elseif known[members[i]] then
      new[i] = false
    else
      new[i] = true
      known[members[i]] = true
      local lifetime = tonumber(lifetimes[i]) or 0
      added[#added + 1] = lifetime > 0 and (now + lifetime) or '+inf'
      added[#added + 1] = members[i]
    end
  end
  return new, added
end

-- Remove up to `count` fingerprints expired at `now` (the oldest first).
local function sweep_expired(key, now, count)
  local expired = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'LIMIT', 0, count)
  call_in_chunks('ZREM', key, expired)
end

-- Record the pairs expiry_find_new() found, sweep, and let the set expire with its last
-- fingerprint (never while one is kept forever).
local function expiry_record(key, added, now, sweep)
  call_in_chunks('ZADD', key, added)
  sweep_expired(key, now, sweep + #added)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #last == 0 then
    return
  end
  if last[2] == 'inf' or last[2] == '+inf' then
    redis.call('PERSIST', key)
  else
    redis.call('PEXPIREAT', key, tonumber(last[2]) + 1)
  end
end
