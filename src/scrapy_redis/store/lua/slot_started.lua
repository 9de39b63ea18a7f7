-- A download of a slot reached the worker's downloader (scrapy_redis.politeness): its
-- slot's next start is allowed the delay drawn at its pop after now (see _slots.lua), so
-- that a worker slow to start what it popped (a busy process) does not bring two starts
-- closer than the delay. A hold a site asked for (Retry-After, st[10]) is kept: the
-- report of the start of the request it answered comes after it.
-- KEYS[1..4] = the queued requests (<queue key>:polite:pq), ready, waiting, slots
-- ARGV[1] = the slot
-- returns the ms until the slot's next start is allowed (0: now)
--#include _slots.lua

local k = slot_keys(KEYS[1])
local slot = ARGV[1]
local raw = redis.call('HGET', k.slots, slot)
if not raw then
  return 0
end
local st = decode_state(k, slot, raw)
local now = now_ms()
local delay = st[8] or 0
if delay > 0 and ((st[9] or 0) > 0 or now + delay > st[1]) then
  st[1], st[9], st[14] = math.max(now + delay, st[10] or 0), 0, ''
  if st[6] == 'w' or st[6] == 'r' then
    place(k, slot, st, now)
  end
  save_slot(k, slot, st)
end
return math.max(0, st[1] - now)
