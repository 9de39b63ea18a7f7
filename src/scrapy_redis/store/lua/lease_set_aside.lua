-- Move leased entries that cannot be decoded to a list kept for people to look at, and
-- release them, in one step: a worker dying half-way can neither lose nor duplicate one.
-- KEYS[1] = the leases hash: lease id -> cmsgpack {op, key, key2, arg, entry...}
-- KEYS[2] = the lease deadlines sorted set
-- KEYS[3] = the list the entries are moved to (RPUSH), e.g. <queue>:invalid (a per-slot
--           queue's member: its request's own bytes, see set_aside_entry())
-- KEYS[4] = (optional) the deliveries hash: what was counted for the entries is forgotten
-- ARGV[1..n] = pairs (lease id, position of the entry in it, 1 = the first)
-- returns how many entries were moved: an entry already moved or released (a resent
--         call, or a lease another worker recovered) is not moved again
--#include _leases.lua

local deliveries = suspects(KEYS[4])
local moved = 0
for i = 1, #ARGV, 2 do
  local id, at = ARGV[i], 4 + tonumber(ARGV[i + 1])
  local raw = redis.call('HGET', KEYS[1], id)
  if raw then
    local record = cmsgpack.unpack(raw)
    if at > 4 and at <= #record and record[at] then
      record_ended(record, {record[at]})
      redis.call('RPUSH', KEYS[3], set_aside_entry(record[1], record[at]))
      forget_deliveries(deliveries, {record[at]})
      record[at] = false
      moved = moved + 1
      store_record(KEYS[1], KEYS[2], id, record)
      forget_done_suspect(KEYS[1], deliveries, id)
    end
  end
end
return moved
