-- Forget one fingerprint of a lean duplicate filter (so that its request can be
-- scheduled again), keeping the filter's count; nothing if it is not there.
-- KEYS[1] = the filter's meta hash (field "count")
-- KEYS[2] = the fingerprint's bucket
-- KEYS[3..] = the fingerprint's bucket in each part of each generation that may be live
--             (fingerprints that expire, see _lean_expiry.lua; none without). Their
--             counts (fields "g<generation>") are of the fingerprints recorded, which
--             set how many parts a generation has: they stay.
-- ARGV[1] = the fingerprint's member
-- returns 1 if it was removed, 0 if it was not there

local removed = redis.call('SREM', KEYS[2], ARGV[1])
if removed == 1 then
  redis.call('HINCRBY', KEYS[1], 'count', -1)
end
for i = 3, #KEYS do
  if redis.call('SREM', KEYS[i], ARGV[1]) == 1 then
    removed = 1
  end
end
return removed
