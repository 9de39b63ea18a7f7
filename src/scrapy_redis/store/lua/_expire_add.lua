-- Included by the scripts that check and record a batch of fingerprints that expire
-- (bloom_expire_add.lua, bloom_module_expire_add.lua, lean_expire_add.lua): not a script.
-- Their keys and arguments:
-- KEYS[1] = the record key of this writer's writes to the filter (see _once.lua)
-- KEYS[2..] = the filter's keys (see the filter's `open`)
-- ARGV[1] = how long the record is kept, in ms; ARGV[2] = the write number of this call
-- ARGV[3] = the fingerprints (msgpack array); ARGV[4] = their lifetimes in ms (msgpack)
-- ARGV[5] = the filter's config (msgpack, see the filter's `open`)
--#include _expiry.lua
--#include _once.lua

-- The reply: one character per fingerprint, "1" if it was new (recorded), "0" if alive
-- already; or "stale" (nothing done: the client's estimate of the server's clock, or of
-- the filter, is off: it reads them again). At most once: a copy of this call sent again
-- (its reply was lost) gets the first reply and writes nothing. `open(first key index,
-- config, now)` gives the filter's state (nil: stale); `find_new(state, numbers,
-- members, lifetimes, now)` checks and records, giving a flag per member.
local function expire_add(open, find_new)
  local before = applied_before(KEYS[1], ARGV[2])
  if before then
    return before
  end
  local now = server_ms()
  local state = open(2, cmsgpack.unpack(ARGV[5]), now)
  if not state then
    return 'stale'
  end
  local members, lifetimes = cmsgpack.unpack(ARGV[3]), cmsgpack.unpack(ARGV[4])
  local numbers = {}
  for i = 1, #members do
    numbers[i] = 1
  end
  local new = find_new(state, numbers, members, lifetimes, now)
  local flags = {}
  for i = 1, #members do
    flags[i] = new[i] and '1' or '0'
  end
  local reply = table.concat(flags)
  record_write(KEYS[1], ARGV[2], reply, ARGV[1])
  return reply
end
