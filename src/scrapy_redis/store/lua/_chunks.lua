-- Included (scrapy_redis.store.scripts) by scripts that pass many values to one command: not
-- a script.

-- redis.call(command, key, ...args), in calls of at most 2000 values (unpack's stack limit).
local function call_in_chunks(command, key, args)
  for i = 1, #args, 2000 do
    redis.call(command, key, unpack(args, i, math.min(i + 1999, #args)))
  end
end
