-- Delete one queue (or one lane of a split queue) with its leases, atomically: a push of
-- a new priority meanwhile cannot leave its list behind, unindexed (a later push of that
-- priority would index it again, and revive the requests purged).
-- KEYS[1] = the queue: a list (FifoQueue, LifoQueue) or a PriorityQueue's index (sorted
--           set, member = priority as text)
-- KEYS[2..n] = the lists of the priorities in ARGV, in that order, then the other keys to
--              delete (the lease keys; priority lists found unindexed...): one slot; the
--              lists that a per-slot queues' index among them names (a key ending in
--              "polite:lists", see _slot_store.lua) are deleted too
-- ARGV[1..m] = the index members (priorities) whose lists are KEYS[2..m+1]
-- returns {0, member, ...}: the index names priorities whose lists are not in KEYS, and
--         nothing was deleted (call again with them); else {1, keys deleted}

local passed = {}
for i = 1, #ARGV do
  passed[ARGV[i]] = true
end
local missing = {0}
if redis.call('TYPE', KEYS[1])['ok'] == 'zset' then
  for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    -- an entry of the original scrapy-redis (not an integer) is deleted with the index
    if string.match(member, '^%-?%d+$') and not passed[member] then
      missing[#missing + 1] = member
    end
  end
end
if #missing > 1 then
  return missing
end
local doomed = {}
for _, key in ipairs(KEYS) do
  doomed[#doomed + 1] = key
  if string.sub(key, -12) == 'polite:lists' and redis.call('TYPE', key)['ok'] == 'zset' then
    for _, group in ipairs(redis.call('ZRANGE', key, 0, -1)) do
      doomed[#doomed + 1] = string.sub(key, 1, -6) .. 'q:' .. group
    end
  end
end
local deleted = 0
for i = 1, #doomed, 2000 do
  deleted = deleted + redis.call('UNLINK', unpack(doomed, i, math.min(i + 1999, #doomed)))
end
return {1, deleted}
