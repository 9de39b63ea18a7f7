-- Push one batch of requests moved from another Redis (python -m scrapy_redis.move_crawl)
-- into one queue (or lane), skipping the entries a batch not yet confirmed released on the
-- source pushed already: a move killed after pushing a batch and before releasing it
-- there finds that batch back in the source queue (a worker recovers its expired lease)
-- when it is run again, and pushes none of it twice.
-- KEYS[1] = the entries pushed whose release on the source is not confirmed yet (a hash:
--           SHA1 of the entry -> copies; <queue key>:moving, see lua/move_confirm.lua)
-- KEYS[2] = the queue: a PriorityQueue's index, or a list (FifoQueue, LifoQueue)
-- KEYS[3..n] = a PriorityQueue's lists, one per priority of the entries
-- ARGV[1] = "prio" (a PriorityQueue: RPUSH to the priority's list, as a push) or "list"
--           (LPUSH, as a push)
-- ARGV[2..n] = triples (number of the entry's list in KEYS; its priority; the entry), in
--              the order they were popped
-- returns how many entries were pushed (the others were pushed before)

local pushed = 0
local before = {} -- per entry, the copies pushed by earlier batches not matched yet
for i = 2, #ARGV, 3 do
  local list, priority, entry = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2]
  local digest = redis.sha1hex(entry)
  if before[digest] == nil then
    before[digest] = tonumber(redis.call('HGET', KEYS[1], digest)) or 0
  end
  -- a copy pushed before stays pending, now for this batch; else this one is pushed
  -- (twice the same entry in one batch: pushed twice)
  if before[digest] > 0 then
    before[digest] = before[digest] - 1
  else
    if ARGV[1] == 'prio' then
      redis.call('RPUSH', KEYS[list], entry)
      redis.call('ZADD', KEYS[2], -tonumber(priority), priority)
    else
      redis.call('LPUSH', KEYS[2], entry)
    end
    redis.call('HINCRBY', KEYS[1], digest, 1)
    pushed = pushed + 1
  end
end
return pushed
