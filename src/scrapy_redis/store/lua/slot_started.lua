-- A download of a slot left the worker (scrapy_redis.politeness): its slot's next start
-- is allowed the delay drawn at its pop after now (see _slots.lua), so that a worker
-- slow to start what it popped (a busy process) does not bring two starts closer than
-- the delay. A hold a site asked for (Retry-After, st[10]) is kept: the report of the
-- start of the request it answered comes after it.
-- The slot stops waiting for the report of its unreported start (st[9], st[14]) only if
-- that start is the reporting request's: a report of another request (one whose start
-- was lost after REPORT_GRACE, another worker's pop then giving the slot a new one)
-- still pushes the next start to at least the delay after now (a start happened now),
-- and the slot keeps waiting for the owner's report (else the next start, counted from
-- this report, could come less than the delay after the owner's bytes).
-- KEYS[1..4] = the queued requests (<queue key>:polite:pq), ready, waiting, slots
-- ARGV[1] = the slot
-- ARGV[2] = (optional) the id of the request whose start it is (24 characters: its
--           member's priority and sequence, or a robots.txt's own); none or '': any
--           unreported start is cleared (callers before it)
-- returns the ms until the slot's next start is allowed (0: now)
--#include _slots.lua

local k = slot_keys(KEYS[1])
local slot, id = ARGV[1], ARGV[2] or ''
local raw = redis.call('HGET', k.slots, slot)
if not raw then
  return 0
end
local st = decode_state(k, slot, raw)
local now = now_ms()
local delay = st[8] or 0
local owner = st[14] or '' -- ('' in states written before it: any report clears)
local own = id == '' or owner == '' or owner == id
if delay > 0 and (st[9] or 0) > 0 and own then
  st[1], st[9], st[14] = math.max(now + delay, st[10] or 0), 0, ''
elseif delay > 0 and now + delay > st[1] then
  st[1] = math.max(now + delay, st[10] or 0) -- (another's unreported start is kept)
else
  return math.max(0, st[1] - now)
end
if st[6] == 'w' or st[6] == 'r' then
  place(k, slot, st, now)
end
save_slot(k, slot, st)
return math.max(0, st[1] - now)
