-- Record fingerprints of a lean duplicate filter whose fingerprints expire (see
-- _lean_expiry.lua), at most once. KEYS, ARGV and the reply: see _expire_add.lua
-- (KEYS[2..]: the filter's keys, ARGV[5]: its config, of lean_expiry_open(); ARGV[3]:
-- the members, see _lean_expiry.lua; a lifetime of 0: forever).
--#include _lean_expiry.lua
--#include _expire_add.lua

return expire_add(lean_expiry_open, function(state, numbers, members, lifetimes, now)
  local new, added = lean_expiry_find_new(state, numbers, members, lifetimes, now)
  lean_expiry_record(state, added, members, lifetimes, now)
  return new
end)
