-- Take the most urgent requests among the download slots allowed to start one now
-- (scrapy_redis.politeness; keys and members: see _slots.lua), optionally leasing them.
-- Each request taken starts its slot's delay (the next start is allowed that long after
-- now, on the Redis server's clock) and takes one of its in-flight places (given back
-- when its lease is released or recovered); a slot that must wait holds up no other.
-- KEYS[1..4] = the queued requests (<queue key>:polite:pq), ready, waiting, slots
-- KEYS[5], KEYS[6], KEYS[7] = (to lease) the leases hash, the lease deadlines sorted set,
--           the deliveries hash (a worker takes at most one suspect at a time)
-- ARGV[1] = how many requests to take at most: N, or "N+E": N of the most urgent ready
--           slots, then up to E more while the most urgent ready slot has no delay (no
--           configured or AutoThrottle delay, Crawl-delay or Retry-After hold) and no more
--           than half its concurrency in flight after the take (a worker leases ahead
--           what it will start within a fraction of a second, and a slot that limits
--           anything is never taken ahead of need)
-- ARGV[2] = "1" if the worker reports the starts of slots with a delay (slot_started.lua);
--           "1:<ms>" if it also holds a request until its start: once the ready slots
--           are taken, it takes (within its room, N) one request of the slot whose next
--           start is the soonest within <ms>, starting then (its delay and the wait for
--           its report count from then; no report pending, below the cap): one a pop,
--           so that the workers asking at that time share them (a worker hands what it
--           takes to its engine and middlewares one after the other);
--           "drain" to take requests whatever their slots' limits, in slot order (a move
--           of a stopped crawl: no place is taken, the slots are placed again as used)
-- ARGV[3], ARGV[4] = (to lease) timeout in ms, the id to lease them under
-- ARGV[5..n] = (to lease) this worker's leases whose work is done, released first:
--              groups of (lease id, n, n positions), n = 0 for the whole lease
-- returns {record, wait, slots, now, starts, corrupt}: the record {op, key, key2, arg, entry...}
--         packed ("" if none taken), entries in the order taken; wait = ms until the
--         earliest slot with requests may start one (with "1:<ms>": may be taken; 0: one
--         may now; -1: none may until a download ends, or nothing is queued); the slots
--         taken from that have a delay (whose starts the worker reports, see
--         slot_started.lua); the server's clock (ms); per request taken, the time (ms,
--         server clock) from which it may start (after now if taken early); the bad
--         values replaced since the last pop reported them (kind, count, ...: see
--         _slots.lua), for this worker to log and count
--#include _leases.lua

-- Whether a slot limits nothing now: no delay of any kind, and at most half its
-- concurrency in flight once one more is taken.
local function unbound(st, now)
  local cap = st[4]
  return st[3] == 0 and (st[12] or 0) == 0 and (st[10] or 0) <= now
    and (cap == 0 or 2 * (st[2] + 1) <= cap)
end

-- The state of a waiting slot whose next start is within `early` ms (a worker holding
-- what it takes until its start may take it now), or nil; and whether it is left out
-- only because the report of its last start is pending (to ask again soon).
local function early_slot(k, slot, now, early)
  local st = load_slot(k, slot)
  if (st[9] or 0) > 0 and now < st[9] + st[8] + REPORT_GRACE then
    return nil, true
  end
  if st[6] ~= 'w' or st[1] <= now or st[1] > now + early or (st[4] > 0 and st[2] >= st[4]) then
    return nil, false
  end
  return st, false
end

-- The starts (ms) of the requests of a lease taken before (a retried pop): a request whose
-- slot still waits for the report of its start at that start (if later), others now.
local function lease_starts(k, packed, now)
  local record, starts = cmsgpack.unpack(packed), {}
  for i = 5, #record do
    local slot = slot_of(record[i])
    local st = load_slot(k, slot)
    local held = st[14] == request_id(slot, record[i]) and (st[9] or 0) > now
    starts[#starts + 1] = held and st[9] or now
  end
  return starts
end

local k = slot_keys(KEYS[1])
local leasing = #KEYS >= 6
if leasing then
  release_leases(KEYS[5], KEYS[6], 5, KEYS[7])
  -- A lease with this id exists: this call is a retry (its reply was lost).
  local leased = redis.call('HGET', KEYS[5], ARGV[4])
  if leased then
    local at = now_ms()
    return {leased, 0, {}, at, lease_starts(k, leased, at)}
  end
end

local room, extra = string.match(ARGV[1], '^(%d+)%+(%d+)$')
local count = tonumber(room or ARGV[1])
local most = count + tonumber(extra or 0)
local report, early = ARGV[2], 0
local mode, ahead = string.match(ARGV[2], '^(%d):(%d+)$')
if mode then
  report, early = mode, tonumber(ahead)
end
if not (leasing and report == '1') then
  early = 0 -- (a held request must be leased, and its start reported)
end
local now, micros = now_ms()

-- Slots whose wait is over are ready (at most what this call may take, and some more).
-- (A slot whose state does not say it waits is not ours there: removed, counted.)
for _, slot in ipairs(redis.call('ZRANGEBYSCORE', k.waiting, '-inf', now, 'LIMIT', 0, most + 64)) do
  local st = load_slot(k, slot)
  if st[6] == 'w' then
    place(k, slot, st, now)
    save_slot(k, slot, st)
  else
    redis.call('ZREM', k.waiting, slot)
    note_corrupt(k, 'waiting')
  end
end

if report == 'drain' then -- a move of a stopped crawl: every request, whatever its limits
  local taken = take_any(k, most)
  if #taken == 0 then
    return {'', -1, {}}
  end
  local packed = pack_record('slot', KEYS[1], '', '', taken)
  if leasing then
    lease(KEYS[5], KEYS[6], ARGV[4], ARGV[3], packed)
  end
  return {packed, 0, {}}
end

-- How many ready members that are not ours a pop removes at most.
local STRAYS = 1000

-- The bad values the scripts replaced since the last pop reported them: kind, count, ...
local function take_corrupt()
  local found = redis.pcall('HGETALL', k.corrupt)
  if found['err'] then -- (not a hash: note_corrupt replaces it)
    return {}
  elseif #found > 0 then
    redis.call('DEL', k.corrupt)
  end
  return found
end

local deliveries = leasing and suspects(KEYS[7]) or nil
local busy = deliveries and holds_suspect(KEYS[5], deliveries, ARGV[4])
local taken, skipped, starts = {}, {}, {}
local delayed, delayed_list = {}, {} -- the slots taken from whose starts wait for a report
local candidates, next_candidate, pending, took_early = nil, 1, false, false

-- The most urgent ready slot (its state and ready member), removing the ready members
-- that their slots' states do not name (not ours; STRAYS at most: then `more` is true).
local function ready_slot()
  for _ = 1, STRAYS do
    local top = redis.call('ZRANGE', k.ready, 0, 0)[1]
    if not top then
      return nil, nil, nil, false
    end
    local slot = string.sub(top, 25)
    local st = load_slot(k, slot)
    if st[6] == 'r' and st[7] == top then
      return slot, st, top, false
    end
    redis.call('ZREM', k.ready, top)
    note_corrupt(k, 'ready')
  end
  return nil, nil, nil, true
end

-- The slot to take from next: the most urgent ready one (with its ready member), else,
-- within the room, the waiting one that may start soonest within `early` ms; its state,
-- and when its request may start.
local function next_slot()
  local slot, st, top, more = ready_slot()
  if slot then
    return slot, st, now, top
  elseif more then
    return nil -- (the next pop goes on)
  end
  if early == 0 or #taken >= count or took_early then
    return nil -- one early request a pop: the workers asking at that time share them
  end
  candidates = candidates
    or redis.call('ZRANGEBYSCORE', k.waiting, '(' .. now, now + early, 'LIMIT', 0, count + 64)
  while next_candidate <= #candidates do
    local slot = candidates[next_candidate]
    next_candidate = next_candidate + 1
    local st, unreported = early_slot(k, slot, now, early)
    if st then
      return slot, st, st[1], nil
    end
    pending = pending or unreported
  end
  return nil
end

for _ = 1, most + 64 do
  if #taken >= most then
    break
  end
  local slot, st, start, top = next_slot()
  if not slot then
    break
  end
  if #taken >= count and not unbound(st, now) then
    break -- the extra requests: only of slots that limit nothing now
  end
  local head, after = slot_head(k, slot, 2)
  local suspect = head and deliveries and redis.call('HEXISTS', deliveries, redis.sha1hex(head)) == 1
  if head and suspect and busy then
    if top then -- this worker holds a suspect: not another one now
      redis.call('ZREM', k.ready, top)
      skipped[#skipped + 1] = top
    end
  elseif not head then
    unplace(k, slot, st)
    save_slot(k, slot, st)
  else
    take_head(k, slot, head, after)
    taken[#taken + 1] = head
    if suspect then
      busy = true
      redis.call('HSET', deliveries, suspect_marker(ARGV[4]), ARGV[4] .. '|' .. #taken)
    end
    if leasing then
      st[2] = st[2] + 1
    end
    st[13] = (st[13] or 0) + 1
    count_start(st, start)
    starts[#taken] = start
    took_early = took_early or start > now
    st[8] = next_delay(st, slot, micros)
    st[1] = start + st[8]
    st[9] = (leasing and st[8] > 0 and report == '1') and start or 0
    st[14] = st[9] > 0 and request_id(slot, head) or ''
    if st[8] > 0 and not delayed[slot] then
      delayed[slot] = true
      delayed_list[#delayed_list + 1] = slot
    end
    place(k, slot, st, now, after or false)
    save_slot(k, slot, st)
  end
end
flush_count(k) -- (the requests taken from lists, counted once)
for _, member in ipairs(skipped) do
  redis.call('ZADD', k.ready, 0, member)
end

local wait = -1
if redis.call('ZCARD', k.ready) > #skipped then
  wait = 0
elseif early > 0 then
  -- `early` before the first start beyond the window; soon if a slot within it waits
  -- for a report
  local first = redis.call('ZRANGEBYSCORE', k.waiting, '(' .. (now + early), '+inf', 'LIMIT', 0, 1, 'WITHSCORES')
  if first[2] then
    wait = math.max(0, tonumber(first[2]) - early - now)
  end
  if pending or (candidates and #candidates >= count + 64) then
    wait = wait < 0 and REPORT_POLL or math.min(wait, REPORT_POLL)
  end
else
  local first = redis.call('ZRANGE', k.waiting, 0, 0, 'WITHSCORES')
  if first[2] then
    wait = math.max(0, tonumber(first[2]) - now)
  end
end
if #taken == 0 then
  return {'', wait, {}, now, {}, take_corrupt()}
end
local packed = pack_record('slot', KEYS[1], '', '', taken)
if leasing then
  lease(KEYS[5], KEYS[6], ARGV[4], ARGV[3], packed)
end
return {packed, wait, delayed_list, now, starts, take_corrupt()}
