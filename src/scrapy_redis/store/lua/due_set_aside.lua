-- Set aside members of a queue's requests due later that are not requests due later (see
-- due_add.lua: msgpack {priority, a random number, the serialized request[, its slot]}):
-- anyone who can write to Redis may leave one there, and it must not stop the others.
-- KEYS[1] = the requests due later (sorted set)
-- KEYS[2] = the queue's entries set aside as undecodable (a list, <queue key>:invalid)
-- ARGV[1..n] = the members
-- returns how many were set aside (a member another worker set aside already is not)

local moved = 0
for _, member in ipairs(ARGV) do
  if redis.call('ZREM', KEYS[1], member) == 1 then
    redis.call('RPUSH', KEYS[2], member)
    moved = moved + 1
  end
end
return moved
