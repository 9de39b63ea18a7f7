-- Included (through _slots.lua) by the scripts of the per-slot queues: how their requests
-- are stored, read and removed. Not a script.
-- A queued request belongs to a group: its slot and priority, "<slot> NUL <12 hex: 2^47 -
-- priority>". Its member (what a pop returns, a lease holds and a put back gives back) is
-- "<group><12 hex: sequence number><request>". A group's requests are either
--   inline: members of the sorted set pq (score 0; the layout of version 1, which a crawl
--           persisted then still has: it is read as is), a small group's only layout, or
--   listed: elements "<6 bytes: sequence number, big-endian><request>" of the list
--           "<base>q:<group>", oldest first, its group a member of the sorted set
--           "<base>lists" (score 0) while the list is not empty.
-- What follows the group in a member (12 hex sequence, request) is its "tail".
-- A group whose inline requests reach LIST_FROM moves them to its list, MOVE_CHUNK per
-- call at most (oldest first); while some are still inline, the list holds the oldest of
-- the group: its elements all come before the group's inline members. A list element
-- costs about what an element of a PriorityQueue's list does (plus the sequence), an
-- inline member some 110 bytes more (a skiplist node, a hash table entry), a list about
-- 250 bytes (a key, and its member in "lists"): lists pay from a few requests on.
-- "<base>more" counts the listed requests (the queue's length is ZCARD pq + more).

local LIST_FROM = 4
local MOVE_CHUNK = 256

-- The sequence number of a member's tail (nil: not 12 hex digits, not a member of ours).
local TWELVE_HEX = '^' .. string.rep('[0-9a-f]', 12)

local function tail_seq(tail)
  return string.match(tail, TWELVE_HEX) and tonumber(string.sub(tail, 1, 12), 16) or nil
end

-- A queued request's sort key: its priority and sequence numbers (the 24 hex after NUL;
-- 0 for what is no number: a member not of ours).
local function id_of(member, slot)
  local at = #slot + 2
  local priority = tonumber(string.sub(member, at, at + 11), 16)
  return priority or 0, tail_seq(string.sub(member, at + 12)) or 0
end

local function before(slot, a, b)
  local pa, sa = id_of(a, slot)
  local pb, sb = id_of(b, slot)
  return pa < pb or (pa == pb and sa < sb)
end

-- The sequence number of a list element.
local function seq_of(element)
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
  return string.format('%02x%02x%02x%02x%02x%02x', string.byte(element, 1, 6)) .. string.sub(element, 7)
end

local function list_key(k, group)
  return k.base .. 'q:' .. group
end

-- The inline members of `group` (a lexicographic range of pq: the 12 hex after it).
local function inline_range(group)
  return '(' .. group, '(' .. group .. '\255'
end

-- The slot's `n` (default 1, at most 2) most urgent queued requests: the first, or nil,
-- and the next (members, inline or listed).
local function slot_head(k, slot, n)
  n = n or 1
  local low, high = '[' .. slot .. '\0', '(' .. slot .. '\1'
  local found = redis.call('ZRANGEBYLEX', k.pq, low, high, 'LIMIT', 0, n)
  local groups = redis.call('ZRANGEBYLEX', k.lists, low, high, 'LIMIT', 0, n)
  for _, group in ipairs(groups) do
    for _, element in ipairs(redis.call('LRANGE', list_key(k, group), 0, n - 1)) do
      found[#found + 1] = group .. to_tail(element)
    end
  end
  if #groups > 0 then
    table.sort(found, function(a, b) return before(slot, a, b) end)
  end
  return found[1], found[2]
end

-- Move the oldest inline requests of `group` (at most MOVE_CHUNK) to the tail of its list,
-- once it has LIST_FROM of them or a list already.
local function settle(k, group)
  local key = list_key(k, group)
  local low, high = inline_range(group)
  if redis.call('EXISTS', key) == 0 and redis.call('ZLEXCOUNT', k.pq, low, high) < LIST_FROM then
    return
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
  if #moved == 0 then
    return
  end
  call_in_chunks('RPUSH', key, elements)
  call_in_chunks('ZREM', k.pq, moved)
  redis.call('ZADD', k.lists, 0, group)
  redis.call('INCRBY', k.more, #moved)
end

-- `n` listed requests were taken: the count goes down (and away at 0).
local function uncount(k, n)
  if redis.call('DECRBY', k.more, n) <= 0 then
    redis.call('DEL', k.more)
  end
end

-- Remove the slot's head `head` (just read by slot_head); `after`: the next one, if any
-- (an inline group with more requests is settled: a crawl of version 1 moves to lists).
local function take_head(k, slot, head, after)
  local group = string.sub(head, 1, #slot + 13)
  local key = list_key(k, group)
  local tail = string.sub(head, #group + 1)
  if tail_seq(tail) and redis.call('LINDEX', key, 0) == to_element(tail) then
    redis.call('LPOP', key)
    uncount(k, 1)
    if redis.call('EXISTS', key) == 0 then
      redis.call('ZREM', k.lists, group)
    end
    return
  end
  redis.call('ZREM', k.pq, head)
  if after and string.sub(after, 1, #group) == group then
    settle(k, group)
  end
end

-- Queue new requests of one group, their `tails` in sequence order (newer than any queued).
local function add_new(k, group, tails)
  local key = list_key(k, group)
  local low, high = inline_range(group)
  local inline = redis.call('ZLEXCOUNT', k.pq, low, high)
  if inline == 0 and (#tails >= LIST_FROM or redis.call('EXISTS', key) == 1) then
    local elements = {}
    for i, tail in ipairs(tails) do
      elements[i] = to_element(tail)
    end
    call_in_chunks('RPUSH', key, elements)
    redis.call('ZADD', k.lists, 0, group)
    redis.call('INCRBY', k.more, #elements)
    return
  end
  local args = {}
  for _, tail in ipairs(tails) do
    args[#args + 1] = 0
    args[#args + 1] = group .. tail
  end
  call_in_chunks('ZADD', k.pq, args)
  settle(k, group)
end

-- Insert `element` (sequence `seq`) into the list `key` by its sequence (a put back of a
-- request that is not older than the list's head: rare); nothing if it is there already.
local function insert_by_seq(k, key, element, seq)
  local last = redis.call('LINDEX', key, -1)
  if seq > seq_of(last) then
    redis.call('RPUSH', key, element)
    redis.call('INCR', k.more)
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
        redis.call('INCR', k.more)
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
    redis.call('INCR', k.more)
    return nil
  end
  local first = redis.call('ZRANGEBYLEX', k.pq, '(' .. group, '(' .. group .. '\255', 'LIMIT', 0, 1)[1]
  if first and seq > (tail_seq(string.sub(first, #group + 1)) or 0) then
    redis.call('ZADD', k.pq, 0, member)
    return group
  end
  insert_by_seq(k, key, element, seq)
  return nil
end

-- Up to `n` queued requests, whatever their slots (a drain): inline ones first, then
-- listed ones, removed; their members.
local function take_any(k, n)
  local taken = redis.call('ZRANGE', k.pq, 0, n - 1)
  call_in_chunks('ZREM', k.pq, taken)
  local groups = #taken < n and redis.call('ZRANGE', k.lists, 0, n - #taken - 1) or {}
  for _, group in ipairs(groups) do
    if #taken >= n then
      break
    end
    local key = list_key(k, group)
    local elements = redis.call('LPOP', key, n - #taken) or {}
    for _, element in ipairs(elements) do
      taken[#taken + 1] = group .. to_tail(element)
    end
    uncount(k, #elements)
    if redis.call('EXISTS', key) == 0 then
      redis.call('ZREM', k.lists, group)
    end
  end
  return taken
end
