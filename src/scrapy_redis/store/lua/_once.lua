-- Included (scrapy_redis.store.scripts) by the scripts whose writes may be sent twice: not a
-- script. See scrapy_redis/store/writes.py. A write carries the key of its writer's record
-- (string: msgpack {number of the last write applied, its reply}, expiring) and its
-- number, which grows with each write of that writer; a write sent again keeps it.

-- The number of the writer's last write applied (0: none recorded) and its reply.
local function last_write(record_key)
  local raw = redis.call('GET', record_key)
  if not raw then
    return 0, nil
  end
  local record = cmsgpack.unpack(raw)
  return record[1], record[2]
end

-- The reply of write `number` if it was applied already (its number is not above the
-- last one recorded: a copy sent again), else nil: the write is to be applied.
local function applied_before(record_key, number)
  local last, reply = last_write(record_key)
  if tonumber(number) <= last then
    return reply
  end
  return nil
end

-- Record write `number` as applied, with its reply, for `ttl_ms` milliseconds.
local function record_write(record_key, number, reply, ttl_ms)
  redis.call('SET', record_key, cmsgpack.pack({tonumber(number), reply}), 'PX', ttl_ms)
end
