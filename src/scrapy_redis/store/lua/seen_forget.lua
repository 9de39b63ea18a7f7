-- Forget fingerprints of a duplicate filter's one key (so that their requests are new
-- again), whichever layout the key has: the original's set, or the sorted set of
-- fingerprints that expire (see _expiry.lua). Nothing for a fingerprint not there.
-- KEYS[1] = the filter's key (set, sorted set, or missing)
-- ARGV[1], ARGV[2], ... = the fingerprints
-- returns one character per fingerprint: "1" if it was removed, "0" if it was not there

local kind = redis.call('TYPE', KEYS[1])['ok']
local flags = {}
for i = 1, #ARGV do
  local removed = 0
  if kind == 'set' then
    removed = redis.call('SREM', KEYS[1], ARGV[i])
  elseif kind == 'zset' then
    removed = redis.call('ZREM', KEYS[1], ARGV[i])
  elseif kind ~= 'none' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. kind ..
      ', not the fingerprints of a duplicate filter (SCHEDULER_DUPEFILTER_KEY?)')
  end
  flags[i] = tostring(removed)
end
return table.concat(flags)
