-- Increment a stat, first setting it to a start value if it does not exist.
-- KEYS[1] = the stats hash
-- ARGV[1] = the stat name
-- ARGV[2] = the increment (integer or float, as text)
-- ARGV[3] = the start value used when the stat is missing (number, as text)
-- returns the new value, as text
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
return redis.call('HINCRBYFLOAT', KEYS[1], ARGV[1], ARGV[2])
