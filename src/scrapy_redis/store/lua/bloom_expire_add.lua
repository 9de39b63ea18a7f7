-- Check and record a batch of fingerprints in a Bloom filter whose fingerprints expire
-- (see _bloom_expiry.lua), at most once: one atomic call, so two workers racing on one
-- fingerprint see it new exactly once. KEYS, ARGV and the reply: see _expire_add.lua
-- (KEYS[2..]: the generation keys, ARGV[5]: the config, of bloom_expiry_open(); ARGV[3]:
-- fingerprints of 40 lowercase hex digits; a lifetime of 0: the longest).
--#include _bloom_expiry.lua
--#include _expire_add.lua

return expire_add(bloom_expiry_open, bloom_expiry_find_new)
