-- Check and record a batch of fingerprints that expire in a Bloom filter on RedisBloom
-- (see _redisbloom_expiry.lua), at most once: one atomic call, so two workers racing on
-- one fingerprint see it new exactly once. KEYS, ARGV and the reply: see _expire_add.lua
-- (KEYS[2..]: the generations, ARGV[5]: the config, of redisbloom_expiry_open(); a
-- lifetime of 0: the longest).
--#include _redisbloom_expiry.lua
--#include _expire_add.lua

return expire_add(redisbloom_expiry_open, redisbloom_expiry_find_new)
