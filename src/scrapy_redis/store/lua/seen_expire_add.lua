-- Record request fingerprints that expire (see _expiry.lua) in a duplicate filter's sorted
-- set, at most once: a copy of this call sent again (its reply was lost) gets the first
-- reply and writes nothing.
-- KEYS[1] = the fingerprints (sorted set: member = fingerprint, score = expiry in ms)
-- KEYS[2] = the record key of this filter's writes to KEYS[1] (see _once.lua)
-- ARGV[1] = how long the record is kept, in ms
-- ARGV[2] = the write number of this call
-- ARGV[3] = how many expired fingerprints to remove, at least (see SWEEP_MIN)
-- ARGV[4], ARGV[5], ... = pairs: a fingerprint, its lifetime in ms (0: forever)
-- returns one character per pair: "1" if the fingerprint was new (absent or expired: it
--   is recorded), "0" if it was recorded and alive
--#include _expiry.lua
--#include _once.lua

local before = applied_before(KEYS[2], ARGV[2])
if before then
  return before
end
local numbers, members, lifetimes = {}, {}, {}
for i = 4, #ARGV, 2 do
  numbers[#numbers + 1] = 1
  members[#members + 1] = ARGV[i]
  lifetimes[#lifetimes + 1] = ARGV[i + 1]
end
local now = server_ms()
local new, added = expiry_find_new(KEYS[1], numbers, members, lifetimes, now)
expiry_record(KEYS[1], added, now, tonumber(ARGV[3]))
local flags = {}
for i, is_new in ipairs(new) do
  flags[i] = is_new and '1' or '0'
end
local reply = table.concat(flags)
record_write(KEYS[2], ARGV[2], reply, ARGV[1])
return reply
