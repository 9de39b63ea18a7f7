-- What a worker learnt from a response of a slot, for the whole fleet
-- (scrapy_redis.politeness; keys and the slot state: see _slots.lua).
-- KEYS[1..4] = the queued requests (<queue key>:polite:pq), ready, waiting, slots
-- ARGV[1] = the slot
-- ARGV[2] = "retry_after": the site asked to wait (a 429 or 503 with Retry-After):
--             ARGV[3] = how long, in ms; no start of the slot before then
--           "crawl_delay": the site's robots.txt Crawl-delay, ARGV[3] in ms (0: none):
--             the least delay of the slot from now on (not randomized), from now
--           "latency": AutoThrottle, with Scrapy's rules, on one delay for the fleet:
--             ARGV[3] = the download's latency (ms), ARGV[4] = "1" if its status was
--             200, ARGV[5], ARGV[6] = the least and most delay (ms: DOWNLOAD_DELAY,
--             AUTOTHROTTLE_MAX_DELAY), ARGV[7] = AUTOTHROTTLE_TARGET_CONCURRENCY;
--             target = latency / target concurrency, new delay = max(target,
--             (delay + target) / 2) within [least, most]; a response other than 200
--             never lowers it
-- returns the slot's delay (ms) after it, or -1 if the slot is not known
--#include _slots.lua

local k = slot_keys(KEYS[1])
local slot = ARGV[1]
local raw = redis.call('HGET', k.slots, slot)
if not raw then
  return -1
end
local st = decode_state(k, slot, raw)
local now = now_ms()
if ARGV[2] == 'retry_after' then
  local until_ms = now + tonumber(ARGV[3])
  if until_ms > st[1] then
    st[1] = until_ms
  end
  st[10] = math.max(st[10] or 0, until_ms)
  if st[6] == 'w' or st[6] == 'r' then
    place(k, slot, st, now)
  end
elseif ARGV[2] == 'crawl_delay' then
  -- robots.txt was just fetched (the next request waits the delay after it too)
  st[12] = tonumber(ARGV[3])
  if now + st[12] > st[1] then
    st[1] = now + st[12]
  end
  if st[6] == 'w' or st[6] == 'r' then
    place(k, slot, st, now)
  end
else
  local target = tonumber(ARGV[3]) / tonumber(ARGV[7])
  local new = math.max(target, (st[3] + target) / 2)
  new = math.min(math.max(tonumber(ARGV[5]), new), tonumber(ARGV[6]))
  if ARGV[4] == '1' or new > st[3] then
    st[3] = math.floor(new)
  end
  st[11] = 1
end
save_slot(k, slot, st)
return st[3]
