-- Set a stat to a value if it is missing or if the value is beyond it (max_value / min_value).
-- KEYS[1] = the stats hash
-- ARGV[1] = the stat name
-- ARGV[2] = the encoded value
-- ARGV[3] = "max" or "min"
-- ARGV[4] = "n" to compare as numbers, "s" to compare as text (e.g. ISO-8601 UTC times)
-- returns 1 if the stat was set, else 0
local current = redis.call('HGET', KEYS[1], ARGV[1])
local value = ARGV[2]
if current then
  local a, b = current, value
  if ARGV[4] == 'n' then
    a, b = tonumber(current), tonumber(value)
  end
  if a ~= nil and b ~= nil then
    if ARGV[3] == 'max' and b <= a then return 0 end
    if ARGV[3] == 'min' and b >= a then return 0 end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], value)
return 1
