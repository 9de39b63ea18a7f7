-- A start of a download slot for a request a worker downloads without the queue (its
-- robots.txt, fetched by Scrapy's RobotsTxtMiddleware, a media pipeline's file, an
-- engine.download()), or again for a queued request whose start another one used
-- (scrapy_redis.politeness.outside and .robots; keys and the slot
-- state: see _slots.lua). Allowed when a popped request of the slot would be: its next
-- start has come and no start of it waits for its report; then counted as a pop counts
-- one (the delay drawn, the next start set, the start reported by the worker).
-- Each request the site sees counts one start (st[13], count_start): a popped request
-- was counted at its pop, so its own start taken again (lost after REPORT_GRACE, never
-- sent; used by its robots.txt; gone by while it waited) is not counted again; a
-- robots.txt going in the stead of a popped request (its start taken over) is.
-- KEYS[1..4] = the queued requests (<queue key>:polite:pq), ready, waiting, slots
-- KEYS[5], KEYS[6] = (mode "place") the leases hash, the lease deadlines sorted set
-- ARGV[1] = the slot
-- ARGV[2..4] = its limits from the worker's settings: delay ms, concurrency, jitter
-- ARGV[5] = "1" if the worker reports the start (slot_started.lua)
-- ARGV[6] = the request's id (24 characters, unique): the unreported start's
-- ARGV[7] = "held": the request uses an in-flight place the worker holds, of a request
--             of the slot that waits for this one (or whose page waits for it: a
--             media pipeline's file); ARGV[8..n] = the ids of the worker's
--             requests of the slot popped and not sent (or its own): if the slot's
--             unreported start is one of theirs, this request takes it over (it goes
--             now, in its stead; its own: nothing started since, it goes now); its own
--             id among them: a popped request (counted at its pop) takes a start again
--           "place": the request takes an in-flight place too, leased (given back when
--             the lease is released, or recovered from a dead worker); ARGV[8] = the
--             lease timeout in ms, ARGV[9] = the lease id
-- returns 0 if it may start now (counted), the ms to wait before asking again, or -1 if
--         the slot is at its concurrency (ask again after a while)
--#include _leases.lua

local k = slot_keys(KEYS[1])
local slot, id, mode = ARGV[1], ARGV[6], ARGV[7]
local report = ARGV[5] == '1'
local st = load_slot(k, slot)
set_limits(st, {ARGV[2], ARGV[3], ARGV[4]})
local now, micros = now_ms()

if mode == 'held' and (st[9] or 0) > now then
  -- the unreported start is one handed out early (pop_slots.lua): not before its time
  return st[9] - now
end
-- Whether the request is a popped one taking a start again (its pop counted it).
local again = false
for i = 8, (mode == 'held') and #ARGV or 7 do
  again = again or ARGV[i] == id
end
if mode == 'held' and (st[9] or 0) > 0 then
  for i = 8, #ARGV do
    if st[14] == ARGV[i] then -- the start of a request waiting for this one: taken over
      if ARGV[i] ~= id then -- (another request goes with it: one more the site sees)
        st[13] = (st[13] or 0) + 1
        count_start(st, now)
      end
      st[9], st[14] = report and now or 0, report and id or ''
      save_slot(k, slot, st)
      return 0
    end
  end
end

local unreported = (st[9] or 0) > 0 and now < st[9] + st[8] + REPORT_GRACE
if st[1] > now then
  return st[1] - now
elseif unreported then
  return math.min(st[9] + st[8] + REPORT_GRACE - now, REPORT_POLL)
end
if mode == 'place' then
  if st[4] > 0 and st[2] >= st[4] then
    return -1
  end
  st[2] = st[2] + 1
  lease(KEYS[5], KEYS[6], ARGV[9], ARGV[8], pack_record('place', KEYS[1], '', '', {slot .. '\0' .. id}))
end
if not again then
  st[13] = (st[13] or 0) + 1
  count_start(st, now)
end
st[8] = next_delay(st, slot, micros)
st[1] = now + st[8]
st[9] = (report and st[8] > 0) and now or 0
st[14] = st[9] > 0 and id or ''
if st[6] == 'r' or st[6] == 'w' then
  place(k, slot, st, now)
end
save_slot(k, slot, st)
return 0
