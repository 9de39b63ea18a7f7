-- Reading a member of a queue's requests due later (see due_add.lua: msgpack {priority, a
-- random number, the serialized request[, its slot]}). Anyone who can write to Redis may
-- leave something else there: it is set aside, never stops the others, loses none of them.

-- The member's fields, or nil if it is no request due later (cmsgpack cannot read it, or
-- a field is not of its type).
local function due_fields(member)
  local ok, fields = pcall(cmsgpack.unpack, member)
  if not ok or type(fields) ~= 'table' then
    return nil
  end
  local n = #fields
  if (n ~= 3 and n ~= 4) or type(fields[1]) ~= 'number' or type(fields[2]) ~= 'number'
      or type(fields[3]) ~= 'string' or (n == 4 and type(fields[4]) ~= 'string') then
    return nil
  end
  return fields
end

-- The members of ARGV (from `first`, every `step`) due by `now` in the sorted set `due`,
-- read: a list of {member, fields, index in ARGV}. Those that cannot be read move from
-- `due` into `invalid` (a list) now, before any is removed for the queue.
local function read_due(due, invalid, first, step, now)
  local readable = {}
  for i = first, #ARGV, step do
    local member = ARGV[i]
    local score = redis.call('ZSCORE', due, member)
    if score and tonumber(score) <= now then
      local fields = due_fields(member)
      if fields then
        readable[#readable + 1] = {member, fields, i}
      else
        redis.call('ZREM', due, member)
        redis.call('RPUSH', invalid, member)
      end
    end
  end
  return readable
end
