-- Included (scrapy_redis.scripts) by the scripts that dedup and push a batch: not a script.
--#include _chunks.lua

-- Fail before writing anything unless each key is missing or of the type wanted for it:
-- `wanted` is a list of {key, type}. A queue key left by another queue class (a persisted
-- crawl restarted with another SCHEDULER_QUEUE_CLASS) would fail half-way otherwise.
local function check_types(wanted)
  for _, pair in ipairs(wanted) do
    local found = redis.call('TYPE', pair[1])['ok']
    if found ~= 'none' and found ~= pair[2] then
      error({err = 'WRONGTYPE ' .. pair[1] .. ' holds a ' .. found .. ', not a ' .. pair[2] ..
        ' (SCHEDULER_QUEUE_CLASS or SCHEDULER_DUPEFILTER_KEY changed on kept data?)'})
    end
  end
end

-- Whether each of `fingerprints` is new, as a table of booleans, and the fingerprints to
-- record in the set `key` once the new requests are pushed (record_new(); one SMISMEMBER
-- per 2000, not a call each). '' (a dont_filter request) is always new and never
-- recorded; a fingerprint the batch holds twice is new the first time only.
local function find_new(key, fingerprints)
  local checked = {}
  for _, fingerprint in ipairs(fingerprints) do
    if fingerprint ~= '' then
      checked[#checked + 1] = fingerprint
    end
  end
  local known = {}
  for i = 1, #checked, 2000 do
    local last = math.min(i + 1999, #checked)
    local found = redis.call('SMISMEMBER', key, unpack(checked, i, last))
    for j = 1, #found do
      known[checked[i + j - 1]] = found[j] == 1
    end
  end
  local new, added = {}, {}
  for i, fingerprint in ipairs(fingerprints) do
    if fingerprint == '' then
      new[i] = true
    elseif known[fingerprint] then
      new[i] = false
    else
      new[i] = true
      known[fingerprint] = true
      added[#added + 1] = fingerprint
    end
  end
  return new, added
end

-- Record the fingerprints find_new() found, last: a push that fails (a queue key of
-- another type) leaves them unrecorded, so sending the batch again is not refused as
-- duplicates. Redis does not undo a script's writes made before an error.
local function record_new(key, added)
  call_in_chunks('SADD', key, added)
end

-- "1" for each new request, "0" for each duplicate: one string for the client to read.
local function flags(new)
  local result = {}
  for i, is_new in ipairs(new) do
    result[i] = is_new and '1' or '0'
  end
  return table.concat(result)
end

-- Tell idle workers on `channel` ('' = nobody to tell) that `pushed` requests were pushed.
local function announce(channel, pushed)
  if pushed > 0 and channel ~= '' then
    redis.pcall('PUBLISH', channel, pushed) -- refused (an ACL without the channel): no news
  end
end
