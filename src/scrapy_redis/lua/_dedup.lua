-- Included (scrapy_redis.scripts) by the scripts that dedup and push a batch: not a script.
--#include _chunks.lua

-- Whether each of `fingerprints` is new, as a table of booleans, and the new ones
-- recorded in the set `key` (one SMISMEMBER and one SADD per 2000, not one call each).
-- '' (a dont_filter request) is always new and never recorded; a fingerprint the batch
-- holds twice is new the first time only.
local function record_new(key, fingerprints)
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
  call_in_chunks('SADD', key, added)
  return new
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
