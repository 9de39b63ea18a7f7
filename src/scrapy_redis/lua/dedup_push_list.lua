-- Record the fingerprints of a batch of requests and push the new ones onto a list queue.
-- KEYS[1] = the dupefilter set of fingerprints
-- KEYS[2] = the queue (list; LPUSH adds, as for a single request)
-- ARGV[1] = the news channel, told when requests were pushed ("" = nobody to tell)
-- ARGV[2..] = pairs, in enqueue order: fingerprint ("" = dont_filter: no check, not
--             recorded), serialized request ("" = not stored here: only record the fingerprint)
-- returns one integer per pair: 1 if the request is new (pushed when it has an entry),
--         0 if its fingerprint was already recorded (a duplicate: nothing pushed)
local result = {}
local pushed = 0
for i = 2, #ARGV, 2 do
  local fingerprint, entry = ARGV[i], ARGV[i + 1]
  local new = 1
  if fingerprint ~= '' then
    new = redis.call('SADD', KEYS[1], fingerprint)
  end
  if new == 1 and entry ~= '' then
    redis.call('LPUSH', KEYS[2], entry)
    pushed = pushed + 1
  end
  result[#result + 1] = new
end
if pushed > 0 and ARGV[1] ~= '' then
  redis.pcall('PUBLISH', ARGV[1], pushed) -- refused (an ACL without the channel): no news
end
return result
