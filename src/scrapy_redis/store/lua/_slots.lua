-- Included (scrapy_redis.store.scripts) by the scripts of the per-slot queues (fleet-wide
-- limits per download slot, scrapy_redis.politeness): not a script.
-- Keys, all derived from one base "<queue key>:polite:" (one hash tag on a Redis Cluster):
--   pq      sorted set, the queued requests of small groups (a slot and a priority);
--           score 0, member <slot> "\0" <12 hex: 2^47 - priority> <12 hex: sequence
--           number> <request>, so that a slot's requests are a lexicographic range, most
--           urgent first (highest priority, then oldest); a group of more requests is a
--           list, its group a member of pq in its place (see _slot_store.lua: also the
--           keys lists and more)
--   ready   sorted set of the slots that may start a download now, score 0, member
--           <12 hex priority><12 hex sequence><slot> of the slot's first request: the
--           first member is the most urgent request among those slots
--   waiting sorted set of the slots with requests that must wait, score = the
--           earliest start allowed (ms, the Redis server's clock), member = slot
--   slots   hash slot -> msgpack {next start allowed (ms), in flight, delay (ms),
--           concurrency (0: no cap), jitter (0.5: uniform 0.5-1.5 x delay), place, ready
--           member, the delay drawn at the last start (ms), the time of the last start
--           while its worker has not reported it (0: reported), the time until which a
--           Retry-After slowed it (ms), 1 if AutoThrottle sets its delay (pushes keep it),
--           the robots.txt Crawl-delay of its site (ms: the least delay), starts so far
--           (one per request sent: a popped request taking its start again, see
--           slot_take.lua, is not counted again),
--           the id (24 hex: priority, sequence; a robots.txt's own) of the request whose
--           start is unreported ('' none; missing in states written before it: any
--           request's end or report clears it),
--           the fleet's starts per minute: the minute (server clock, ms / 60000) of the
--           count, the starts in that minute, the starts in the minute before it, and
--           the time (ms) of the first start of those counts (since when they run
--           without a gap: a slot younger than a minute has its rate over its age)}
-- A start of a slot with a delay is reported by its worker once the request's bytes have
-- left (slot_started.lua): the next start is allowed the drawn delay after that, not
-- after the pop (a busy worker may start what it popped some time later). Until it is
-- reported (at most REPORT_GRACE ms) by the request whose start it is (a report of
-- another request moves the next start, not the wait), the slot waits; a slot whose
-- request is done without reaching a downloader (a response from a cache) counts from
-- the pop (the end of another of its downloads does not: that request's own end).
-- Place is
--           "r" (in ready), "w" (in waiting), "f" (full: at its concurrency, placed
--           again when a download ends), "i" (no request queued)
--   seq     string, the last sequence number given
--   corrupt hash kind -> count of the bad values the scripts found and replaced (see
--           "Bad values" below) and no pop reported yet, "slot:<slot>" -> 1 per slot
--           whose state was replaced: the next pop takes them (its worker logs and
--           counts them, and sets the limits of those slots again)
-- Bad values (written by something else than these scripts, or damaged) never stop the
-- queue: a slot state that does not decode to the expected shape is replaced by a fresh
-- one (due now, in waiting: the next pop places it; its in-flight count restarts at 0;
-- one download at a time until the worker told of it sets its limits again),
-- a ready or waiting member that its slot's state does not name is removed, a list
-- element too short for its sequence number is handed out (sequence 0) as the request
-- it cannot be (the worker sets it aside as undecodable), a seq that is no sequence
-- number restarts from the server's clock (ms: above the numbers given since it was set,
-- unless the fleet queued more than one request a ms meanwhile), a "more" that is not a
-- count restarts; requests that no pop would reach (a pq member without NUL, a slot in
-- none of its places) are set aside or placed again by sweep_slots.lua.
--#include _chunks.lua
--#include _slot_store.lua

local PRIORITY_BIAS = 140737488355327 -- 2^47 - 1: priorities are clamped to +-(2^47 - 1)
-- How long a slot waits at most for the report of its last start (ms), and how often a
-- waiting worker asks again meanwhile.
local REPORT_GRACE = 3000
local REPORT_POLL = 20

-- The polite keys of base key `pq` ("<base>pq").
local function slot_keys(pq)
  local base = string.sub(pq, 1, -3)
  return {pq = pq, ready = base .. 'ready', waiting = base .. 'waiting',
          slots = base .. 'slots', seq = base .. 'seq', base = base,
          lists = base .. 'lists', more = base .. 'more', corrupt = base .. 'corrupt'}
end

-- The Redis server's clock, in ms, and its microseconds (a seed for the random delay).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t[2]
end

-- Sequence numbers stay below this (12 hex digits in a member, 6 bytes in a list element).
local SEQ_LIMIT = 2 ^ 47

-- The last sequence number given; a seq that is not one (not digits, or too large) is
-- set to the server's clock in ms (above any number given since it was set, unless the
-- fleet queued more than a request a ms) and counted.
local function last_seq(k)
  local raw = redis.pcall('GET', k.seq)
  if raw == false then
    return 0
  end
  if type(raw) == 'string' and #raw <= 15 and string.match(raw, '^%d+$') and tonumber(raw) < SEQ_LIMIT then
    return tonumber(raw)
  end
  local now = now_ms()
  redis.call('DEL', k.seq) -- (of another type, maybe)
  redis.call('SET', k.seq, now)
  note_corrupt(k, 'seq')
  return now
end

-- `n` new sequence numbers: the one before the first.
local function take_seqs(k, n)
  local last = redis.pcall('INCRBY', k.seq, n)
  if type(last) == 'number' and last - n >= 0 and last < SEQ_LIMIT then
    return last - n
  end
  last_seq(k) -- (a bad value replaced)
  return redis.call('INCRBY', k.seq, n) - n
end

-- The slot of a queued request's member (one without NUL, not ours: itself).
local function slot_of(member)
  local zero = string.find(member, '\0', 1, true)
  return zero and string.sub(member, 1, zero - 1) or member
end

-- A new request's group (its slot and priority, see _slot_store.lua).
local function slot_group(slot, priority)
  local p = math.max(-PRIORITY_BIAS, math.min(PRIORITY_BIAS, tonumber(priority)))
  return slot .. '\0' .. string.format('%012x', PRIORITY_BIAS - p)
end

-- The id of a queued request's member: its priority and sequence (24 hex, unique).
local function request_id(slot, member)
  return string.sub(member, #slot + 2, #slot + 25)
end

local function ready_member(slot, head)
  return string.sub(head, #slot + 2, #slot + 25) .. slot
end

local function fresh_state()
  return {0, 0, 0, 0, 0, 'i', '', 0, 0, 0, 0, 0, 0, '', 0, 0, 0}
end

local function save_slot(k, slot, st)
  for i = 8, 13 do -- an array without holes (older states have fewer fields)
    st[i] = st[i] or 0
  end
  st[14] = st[14] or ''
  for i = 15, 18 do
    st[i] = st[i] or 0
  end
  redis.call('HSET', k.slots, slot, cmsgpack.pack(st))
end

local PLACES = {r = true, w = true, f = true, i = true}
local LARGEST = 2 ^ 53 -- (exact in a double; not NaN, not infinite)

-- The slot state `raw` decodes to; an error if it has not the shape of one: one msgpack
-- array of 7 fields (the oldest states) to 18, the place a letter of PLACES, the ready
-- member and request id strings, every other field a number from 0 to LARGEST (a
-- comparison with another type raises; NaN compares false). About 0.5 us more than
-- the decoding alone.
local function checked_state(raw)
  local after, st = cmsgpack.unpack_one(raw) -- (-1: all of it read)
  local n = #st
  if after ~= -1 or n < 7 or n > 18 or not PLACES[st[6]] or type(st[7]) ~= 'string'
    or (n >= 14 and type(st[14]) ~= 'string') then
    error('not a slot state')
  end
  for i = 1, n do
    local v = st[i]
    if i ~= 6 and i ~= 7 and i ~= 14 and not (v >= 0 and v <= LARGEST) then
      error('not a slot state')
    end
  end
  return st
end

-- The state of `slot` from its stored value `raw`; one that is not a state is replaced
-- by a fresh one, due now in waiting (the next pop places it, or drops it if the slot
-- has no request), one download at a time until the worker that the next pop tells of
-- it sets the slot's limits again (push_slots.lua, "back"), and counted.
local function decode_state(k, slot, raw)
  local ok, st = pcall(checked_state, raw)
  if ok then
    return st
  end
  st = fresh_state()
  st[4], st[6] = 1, 'w' -- one download at a time until a worker sets its limits again
  redis.call('ZADD', k.waiting, 0, slot)
  save_slot(k, slot, st)
  note_corrupt(k, 'state')
  redis.call('HSET', k.corrupt, 'slot:' .. slot, 1) -- (the worker told sets them)
  return st
end

local function load_slot(k, slot)
  local raw = redis.call('HGET', k.slots, slot)
  if not raw then
    return fresh_state()
  end
  return decode_state(k, slot, raw)
end

-- Count a start of the slot in its minute (the fleet's rate: status reads the starts of
-- this minute and the one before, weighted as a sliding minute).
local function count_start(st, now)
  local minute = math.floor(now / 60000)
  local counted = st[15] or 0
  if counted ~= minute then
    local follows = counted == minute - 1
    st[17] = follows and (st[16] or 0) or 0
    st[15], st[16] = minute, 0
    if not follows then -- (the counts start again: the rate's window with them)
      st[18] = now
    end
  end
  if (st[18] or 0) == 0 then
    st[18] = now
  end
  st[16] = (st[16] or 0) + 1
end

-- Take the slot out of ready or waiting (st[6] = "i" after).
local function unplace(k, slot, st)
  if st[6] == 'r' then
    redis.call('ZREM', k.ready, st[7])
  elseif st[6] == 'w' then
    redis.call('ZREM', k.waiting, slot)
  end
  st[6], st[7] = 'i', ''
end

-- Put the slot where it belongs now: no request (i), at its cap (f), must wait (w),
-- may start now (r). `known`: its head if the caller just read it (false: none), so
-- that a pop walks the big sorted set once less per request.
local function place(k, slot, st, now, known)
  unplace(k, slot, st)
  local head = known
  if known == nil then
    head = slot_head(k, slot)
  end
  if not head then
    return
  end
  local unreported = (st[9] or 0) > 0 and now < st[9] + st[8] + REPORT_GRACE
  if st[4] > 0 and st[2] >= st[4] then
    st[6] = 'f'
  elseif st[1] > now or unreported then
    local at = st[1]
    if at <= now then -- due, but its last start is not reported yet: ask again soon
      at = math.min(st[9] + st[8] + REPORT_GRACE, now + REPORT_POLL)
    end
    redis.call('ZADD', k.waiting, at, slot)
    st[6] = 'w'
  else
    st[7] = ready_member(slot, head)
    redis.call('ZADD', k.ready, 0, st[7])
    st[6] = 'r'
  end
end

-- Place again the slots of members just queued (a slot in waiting or full stays).
local function replace_slots(k, slots, now)
  for slot, _ in pairs(slots) do
    local st = load_slot(k, slot)
    if st[6] == 'r' or st[6] == 'i' then
      place(k, slot, st, now)
      save_slot(k, slot, st)
    end
  end
end

-- Put leased (or dead-lettered) members back in their slots' queues (their place is
-- their sequence number: ahead of what was queued after them).
local function put_back_slots(pq, members)
  local k = slot_keys(pq)
  local now = now_ms()
  local touched, inline, last = {}, {}, 0
  for _, member in ipairs(members) do
    local slot = slot_of(member)
    local group = put_back_member(k, slot, member)
    if group then
      inline[group] = true
    end
    touched[slot] = true
    last = math.max(last, tail_seq(string.sub(member, #slot + 14)) or 0)
  end
  for group, _ in pairs(inline) do
    settle(k, group)
  end
  flush_count(k)
  if last > last_seq(k) then
    redis.call('SET', k.seq, last) -- (moved from another queue) newer requests come after
  end
  replace_slots(k, touched, now)
end

-- Downloads of these leased members ended (done, recovered, given back, set aside):
-- their slots' in-flight places are given back.
local function slots_done(pq, members)
  if #members == 0 then
    return
  end
  local k = slot_keys(pq)
  local now = now_ms()
  for _, member in ipairs(members) do
    local slot = slot_of(member)
    local raw = redis.call('HGET', k.slots, slot)
    if raw then
      local st = decode_state(k, slot, raw)
      st[2] = math.max(0, st[2] - 1)
      local id = st[14]
      if id == nil or id == '' or id == request_id(slot, member) then
        -- done: reported, or never reached a downloader (counted from its pop)
        st[9], st[14] = 0, ''
      end
      if st[6] == 'f' then
        place(k, slot, st, now)
      end
      save_slot(k, slot, st)
    end
  end
end

-- The delay (ms) before the next start of a slot starting a download now: its delay,
-- or with a jitter j, uniform in [1 - j, 1 + j] x delay (Scrapy's RANDOMIZE_DOWNLOAD_DELAY
-- is j = 0.5); at least its site's Crawl-delay.
local function next_delay(st, slot, micros)
  local delay, jitter = st[3], st[5]
  if delay > 0 and jitter > 0 then
    local h = tonumber(string.sub(redis.sha1hex(slot .. ':' .. micros .. ':' .. st[2]), 1, 8), 16)
    delay = delay * (1 - jitter + 2 * jitter * h / 4294967296)
  end
  return math.max(0, math.floor(delay), st[12] or 0) -- a Crawl-delay is a least delay
end

-- A slot's limits from a pushing worker's settings: {delay ms, concurrency, jitter} (a
-- delay AutoThrottle set is kept).
local function set_limits(st, c)
  if (st[11] or 0) ~= 1 then
    st[3] = tonumber(c[1])
  end
  st[4], st[5] = tonumber(c[2]), tonumber(c[3])
end

-- Queue new requests. `conf`: slot -> {delay ms, concurrency, jitter}, the limits
-- the pushing worker's settings give it; `entries`: {slot, priority, request} in
-- enqueue order (first in, first out among equal priorities, fleet-wide: one sequence).
local function push_new_slots(k, conf, entries)
  if #entries == 0 then
    return
  end
  local seq = take_seqs(k, #entries)
  local groups, order, touched = {}, {}, {}
  for _, e in ipairs(entries) do
    seq = seq + 1
    local group = slot_group(e[1], e[2])
    if not groups[group] then
      groups[group] = {}
      order[#order + 1] = group
    end
    table.insert(groups[group], string.format('%012x', seq) .. e[3])
    touched[e[1]] = true
  end
  add_new_groups(k, order, groups)
  local now = now_ms()
  for slot, _ in pairs(touched) do
    local st = load_slot(k, slot)
    local c = conf[slot]
    if c then
      set_limits(st, c)
    end
    if st[6] ~= 'w' then
      place(k, slot, st, now)
    end
    save_slot(k, slot, st)
  end
end
