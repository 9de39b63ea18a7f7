-- Record fingerprints of a lean duplicate filter whose fingerprints expire (see
-- _lean_expiry.lua), at most once: a copy of this call sent again (its reply was lost)
-- gets the first reply and writes nothing.
-- KEYS[1] = the record key of this writer's writes to the filter (see _once.lua)
-- KEYS[2..] = the filter's keys (see lean_expiry_open())
-- ARGV[1] = how long the record is kept, in ms
-- ARGV[2] = the write number of this call
-- ARGV[3] = the members (msgpack array, see _lean_expiry.lua)
-- ARGV[4] = their lifetimes in ms (msgpack array, 0: forever)
-- ARGV[5] = the filter's config (msgpack, see lean_expiry_open())
-- returns one character per member: "1" if it was new (recorded), "0" if alive already;
--   or "stale" (nothing done: the client looks at the filter again, see lean_expiry_open())
--#include _lean_expiry.lua
--#include _once.lua

local before = applied_before(KEYS[1], ARGV[2])
if before then
  return before
end
local now = server_ms()
local state = lean_expiry_open(2, cmsgpack.unpack(ARGV[5]), now)
if not state then
  return 'stale'
end
local members, lifetimes = cmsgpack.unpack(ARGV[3]), cmsgpack.unpack(ARGV[4])
local numbers = {}
for i = 1, #members do
  numbers[i] = 1
end
local new, added = lean_expiry_find_new(state, numbers, members, lifetimes, now)
lean_expiry_record(state, added, members, lifetimes, now)
local flags = {}
for i, is_new in ipairs(new) do
  flags[i] = is_new and '1' or '0'
end
local reply = table.concat(flags)
record_write(KEYS[1], ARGV[2], reply, ARGV[1])
return reply
