-- A batch moved by python -m scrapy_redis.move_crawl is released on the source: its
-- entries are no longer pending on the target (see lua/move_push.lua).
-- KEYS[1] = the pending entries (a hash: SHA1 of the entry -> copies; <queue key>:moving)
-- ARGV[1..n] = the SHA1 of each entry of the batch
-- returns nothing

for _, digest in ipairs(ARGV) do
  if redis.call('HINCRBY', KEYS[1], digest, -1) <= 0 then
    redis.call('HDEL', KEYS[1], digest)
  end
end
