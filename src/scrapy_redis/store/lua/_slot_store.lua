-- Included (through _slots.lua) by the scripts of the per-slot queues: how their requests
-- are stored, read and removed. Not a script.
-- A queued request belongs to a group: its slot and priority, "<slot> NUL <12 hex: 2^47 -
-- priority>". Its member (what a pop returns, a lease holds and a put back gives back) is
-- "<group><12 hex: sequence number><request>"; what follows the group is its "tail". A
-- group's requests are
--   inline: members of the sorted set pq (score 0; the only layout before the lists, a
--           crawl persisted then has: it is read as is), a small group's layout, or
--   listed: elements "<6 bytes: sequence number, big-endian><request>" of the list
--           "<base>q:<group>", oldest first, while the group itself (its "pointer") is a
--           member of pq, where it sorts just before the group's inline members, and of
--           "<base>lists" (score 0: to find the lists without reading pq).
-- So one ZRANGEBYLEX of pq finds a slot's head: its first entry, or the first element of
-- the list the first entry points to. A group whose inline requests reach LIST_FROM moves
-- them to its list, MOVE_CHUNK per call at most (oldest first); while some are still
-- inline, the list holds the oldest of the group: its elements all come before the
-- group's inline members. "<base>more" counts what the lists hold beyond one request each
-- (the queue's length is ZCARD pq + more). A list element costs about what an element of
-- a PriorityQueue's list does (plus 6 bytes), an inline member some 110 bytes more (a
-- skiplist node, a hash table entry), a list some 500 bytes (a key, its pointer, its
-- entry in "lists"): from LIST_FROM requests on, a list costs less.

local LIST_FROM = 4
local MOVE_CHUNK = 256

-- A bad value of `kind` was found and replaced (see _slots.lua): counted in the hash
-- "<base>corrupt" until a pop reports it to its worker.
local function note_corrupt(k, kind)
  if type(redis.pcall('HINCRBY', k.corrupt, kind, 1)) ~= 'number' then
    redis.call('DEL', k.corrupt) -- (not a hash of counts: a bad value too)
    redis.call('HSET', k.corrupt, kind, 1, 'corrupt', 1)
  end
end

-- The sequence number of a member's tail (nil: not 12 hex digits, not a member of ours).
local TWELVE_HEX = '^' .. string.rep('[0-9a-f]', 12)

local function tail_seq(tail)
  return string.match(tail, TWELVE_HEX) and tonumber(string.sub(tail, 1, 12), 16) or nil
end

-- The sequence number of a list element (0 for one too short to hold it: not ours).
local function seq_of(element)
  if #element < 6 then
    return 0
  end
  local a, b, c, d, e, f = string.byte(element, 1, 6)
  return ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
end

-- A member's tail as a list element, and back.
local function to_element(tail)
  local bytes = {}
  for i = 1, 11, 2 do
    bytes[#bytes + 1] = tonumber(string.sub(tail, i, i + 1), 16)
  end
  return string.char(unpack(bytes)) .. string.sub(tail, 13)
end

local function to_tail(element)
  if #element < 6 then -- (its bytes as the request, which the worker cannot decode)
    return string.rep('0', 12) .. element
  end
  return string.format('%012x', seq_of(element)) .. string.sub(element, 7)
end

-- The member of a list element of `group` (an element too short is counted).
local function listed_member(k, group, element)
  if #element < 6 then
    note_corrupt(k, 'element')
  end
  return group .. to_tail(element)
end

local function list_key(k, group)
  return k.base .. 'q:' .. group
end

-- The inline members of `group` (a lexicographic range of pq: the 12 hex after it; its
-- pointer, the group itself, is not in it).
local function inline_range(group)
  return '(' .. group, '(' .. group .. '\255'
end

-- The lists hold `n` more requests (a list made holds its first in its pointer's count):
-- counted by flush_count(k), which every caller of these functions calls once at its end
-- (one INCRBY for a pop's or a push's requests).
local function count(k, n)
  k.uncounted = (k.uncounted or 0) + n
end

local function flush_count(k)
  local n = k.uncounted or 0
  k.uncounted = 0
  if n == 0 then
    return
  end
  local total = redis.pcall('INCRBY', k.more, n)
  if type(total) ~= 'number' then -- not a count: restarted (the length shown is short)
    redis.call('DEL', k.more)
    note_corrupt(k, 'more')
    total = redis.call('INCRBY', k.more, n)
  end
  if total <= 0 then
    redis.call('DEL', k.more)
  end
end

-- The heads slot_head read from lists in this script call, until taken: member ->
-- {list key, whether the list has more after it}.
local listed_heads = {}

-- The slot's `n` (default 1, at most 2) most urgent queued requests: the first, or nil,
-- and the next (members, inline or listed).
local function slot_head(k, slot, n)
  n = n or 1
  local entries = redis.call('ZRANGEBYLEX', k.pq, '[' .. slot .. '\0', '(' .. slot .. '\1', 'LIMIT', 0, n)
  local pointer = #slot + 13 -- the length of a group
  local first, second = entries[1], entries[2]
  if not first or (#first ~= pointer and not (second and #second == pointer)) then
    return first, second -- inline requests only
  end
  local found = {}
  for _, entry in ipairs(entries) do
    if #found >= n then
      break
    end
    local key = #entry == pointer and list_key(k, entry)
    local elements = key and redis.call('LRANGE', key, 0, n - #found - 1)
    if elements and #elements > 0 then
      for i, element in ipairs(elements) do
        local member = listed_member(k, entry, element)
        found[#found + 1] = member
        listed_heads[member] = {key, i < #elements}
      end
    else -- an inline member (or a pointer to nothing: not ours)
      found[#found + 1] = entry
    end
  end
  return found[1], found[2]
end

-- `group`'s list just got `n` requests: its pointer and index entry if it is new.
local function listed(k, group, n, new)
  if new then
    redis.call('ZADD', k.pq, 0, group)
    redis.call('ZADD', k.lists, 0, group)
    n = n - 1
  end
  count(k, n)
end

-- Move the oldest inline requests of `group` (at most MOVE_CHUNK) to the tail of its list,
-- once it has LIST_FROM of them or a list already (`new`: whether it has none, when the
-- caller knows that it should move them).
local function settle(k, group, new)
  local key = list_key(k, group)
  local low, high = inline_range(group)
  if new == nil then
    new = redis.call('EXISTS', key) == 0
    if new and redis.call('ZLEXCOUNT', k.pq, low, high) < LIST_FROM then
      return
    end
  end
  local moved, elements = {}, {}
  for _, member in ipairs(redis.call('ZRANGEBYLEX', k.pq, low, high, 'LIMIT', 0, MOVE_CHUNK)) do
    local tail = string.sub(member, #group + 1)
    if not tail_seq(tail) then
      break -- not a member of ours: it and what follows stay inline
    end
    moved[#moved + 1] = member
    elements[#elements + 1] = to_element(tail)
  end
  if #moved > 0 then
    call_in_chunks('RPUSH', key, elements)
    call_in_chunks('ZREM', k.pq, moved)
    listed(k, group, #moved, new)
  end
end

-- `group` has no list any more: its pointer and index entry go; with the last list, the
-- count of what the lists hold (0 then, whatever a bad value made it). Whether it went.
local function drop_list(k, group)
  redis.call('ZREM', k.pq, group)
  redis.call('ZREM', k.lists, group)
  if redis.call('ZCARD', k.lists) > 0 then
    return false
  end
  redis.call('DEL', k.more)
  k.uncounted = 0
  return true
end

-- A list lost `n` requests from its head: its pointer goes with its last one.
local function unlisted(k, key, group, n, more)
  if more or redis.call('EXISTS', key) == 1 then
    count(k, -n)
  elseif not drop_list(k, group) then
    count(k, 1 - n)
  end
end

-- Remove the slot's head `head` (just read by slot_head); `after`: the next one, if any
-- (an inline group with more requests is settled: a crawl from before the lists moves to
-- them).
local function take_head(k, slot, head, after)
  local group = string.sub(head, 1, #slot + 13)
  local known = listed_heads[head]
  if not known and redis.call('ZREM', k.pq, head) == 0 then -- (not read by slot_head)
    local key, tail = list_key(k, group), string.sub(head, #group + 1)
    known = tail_seq(tail) and redis.call('LINDEX', key, 0) == to_element(tail) and {key, false}
  end
  if #head == #group then -- a pointer to no list, handed out as it is: not ours
    drop_list(k, group)
    note_corrupt(k, 'list')
  elseif known then
    listed_heads[head] = nil
    redis.call('LPOP', known[1])
    unlisted(k, known[1], group, 1, known[2])
  elseif after and string.sub(after, 1, #group) == group then
    settle(k, group)
  end
end

-- Queue new requests of one group, their `tails` in sequence order (newer than any
-- queued): onto its list, or inline (their members added to `args`, ZADD's arguments,
-- for the caller to add). Whether to settle the group once they are added.
local function add_new(k, group, tails, args)
  local found = redis.call('ZRANGEBYLEX', k.pq, '[' .. group, '(' .. group .. '\255', 'LIMIT', 0, LIST_FROM)
  local has_list = found[1] == group
  local inline = #found - (has_list and 1 or 0) -- (or more, at LIST_FROM - 1 and up)
  if inline == 0 and (has_list or #tails >= LIST_FROM) then
    local elements = {}
    for i, tail in ipairs(tails) do
      elements[i] = to_element(tail)
    end
    call_in_chunks('RPUSH', list_key(k, group), elements)
    listed(k, group, #elements, not has_list)
    return false
  end
  for _, tail in ipairs(tails) do
    args[#args + 1] = 0
    args[#args + 1] = group .. tail
  end
  return has_list or inline + #tails >= LIST_FROM, not has_list
end

-- Queue new requests: `groups` maps each group of `order` to its tails (see add_new).
local function add_new_groups(k, order, groups)
  local args, unsettled = {}, {}
  for _, group in ipairs(order) do
    local move, new = add_new(k, group, groups[group], args)
    if move then
      unsettled[group] = new
    end
  end
  call_in_chunks('ZADD', k.pq, args)
  for group, new in pairs(unsettled) do
    settle(k, group, new)
  end
  flush_count(k)
end

-- Insert `element` (sequence `seq`) into the list `key` by its sequence (a put back of a
-- request that is not older than the list's head: rare); nothing if it is there already.
local function insert_by_seq(k, key, element, seq)
  local last = redis.call('LINDEX', key, -1)
  if seq > seq_of(last) then
    redis.call('RPUSH', key, element)
    count(k, 1)
    return
  end
  local start = 0
  while true do
    local chunk = redis.call('LRANGE', key, start, start + 99)
    for _, other in ipairs(chunk) do
      local s = seq_of(other)
      if s == seq then
        return
      elseif s > seq then
        redis.call('LINSERT', key, 'BEFORE', other, element)
        count(k, 1)
        return
      end
    end
    start = start + 100
  end
end

-- Put a member popped before back in its group, at its place (its sequence): ahead of the
-- list when older than its head (LPUSH), else inline or into the list by its sequence.
-- Returns its group if it went inline (to settle), else nil.
local function put_back_member(k, slot, member)
  local group = string.sub(member, 1, #slot + 13)
  local key = list_key(k, group)
  local head = redis.call('LINDEX', key, 0)
  local seq = tail_seq(string.sub(member, #group + 1))
  if not (head and seq) then -- (no sequence: not a member of ours, kept inline as it is)
    redis.call('ZADD', k.pq, 0, member)
    return group
  end
  local element = to_element(string.sub(member, #group + 1))
  if seq < seq_of(head) then
    redis.call('LPUSH', key, element)
    count(k, 1)
    return nil
  end
  local low, high = inline_range(group)
  local first = redis.call('ZRANGEBYLEX', k.pq, low, high, 'LIMIT', 0, 1)[1]
  if first and seq > (tail_seq(string.sub(first, #group + 1)) or 0) then
    redis.call('ZADD', k.pq, 0, member)
    return group
  end
  insert_by_seq(k, key, element, seq)
  return nil
end

-- Up to `n` queued requests, whatever their slots (a drain), removed; their members.
local function take_any(k, n)
  local taken, inline = {}, {}
  for _, entry in ipairs(redis.call('ZRANGE', k.pq, 0, n - 1)) do
    if #taken >= n then
      break
    end
    local zero = string.find(entry, '\0', 1, true)
    local key = zero and #entry == zero + 12 and list_key(k, entry)
    local elements = key and redis.call('LPOP', key, n - #taken) or {}
    for _, element in ipairs(elements) do
      taken[#taken + 1] = listed_member(k, entry, element)
    end
    if #elements > 0 then
      unlisted(k, key, entry, #elements, false)
    else
      if key then -- a pointer to no list: not ours
        drop_list(k, entry)
        note_corrupt(k, 'list')
      end
      inline[#inline + 1] = entry
      taken[#taken + 1] = entry
    end
  end
  call_in_chunks('ZREM', k.pq, inline)
  flush_count(k)
  return taken
end
