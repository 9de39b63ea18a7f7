-- Record the fingerprints of a batch of requests and push the new ones onto a PriorityQueue.
-- KEYS[1] = the dupefilter set of fingerprints
-- KEYS[2] = the queue's index: sorted set, member = priority as text, score = -priority
-- KEYS[3..] = the lists of the priorities of the batch, one per priority
-- ARGV[1] = the news channel, told when requests were pushed ("" = nobody to tell)
-- ARGV[2] = how many priority lists follow KEYS[2] (k)
-- ARGV[3..k+2] = the priority of each of those lists (integers, as text), same order
-- ARGV[k+3..] = triples, in enqueue order: fingerprint ("" = dont_filter: no check, not
--               recorded), number of the request's priority list (1..k), serialized request
--               ("" = not stored here: only record the fingerprint)
-- returns one integer per triple: 1 if the request is new (appended to its priority list
--         when it has an entry), 0 if its fingerprint was already recorded (nothing pushed)
local lists = tonumber(ARGV[2])
local used = {}
local result = {}
local pushed = 0
for i = lists + 3, #ARGV, 3 do
  local fingerprint, list, entry = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local new = 1
  if fingerprint ~= '' then
    new = redis.call('SADD', KEYS[1], fingerprint)
  end
  if new == 1 and entry ~= '' then
    redis.call('RPUSH', KEYS[list + 2], entry)
    used[list] = true
    pushed = pushed + 1
  end
  result[#result + 1] = new
end
for list in pairs(used) do
  local priority = ARGV[list + 2]
  redis.call('ZADD', KEYS[2], -tonumber(priority), priority)
end
if pushed > 0 and ARGV[1] ~= '' then
  redis.pcall('PUBLISH', ARGV[1], pushed) -- refused (an ACL without the channel): no news
end
return result
