-- Release leases whose work is done, wholly or in part (see scrapy_redis.queues.leases).
-- KEYS[1] = the leases hash
-- KEYS[2] = the lease deadlines sorted set
-- KEYS[3] = (optional) the deliveries hash: the counts of the released entries are
--           forgotten
-- ARGV[1..n] = groups of (lease id, n, n positions): n = 0 releases the whole lease,
--              otherwise the entries at those positions (1 = the first) are done
-- returns 1
--#include _leases.lua

release_leases(KEYS[1], KEYS[2], 1, KEYS[3])
return 1
