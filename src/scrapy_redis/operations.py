"""What the fleet tools change in Redis, for ``scrapy redis`` and the dashboard alike:
push start messages, recover what dead workers held. Each change is one Redis command
or one of the package's Lua scripts; none needs a running crawl."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scrapy_redis.leases import LeaseBook, Recovery
from scrapy_redis.workers import new_worker_id

#: Start messages sent by one command.
PUSH_BATCH = 1000


def push_messages(
    server: Any, key: str, mode: str, messages: Sequence[str], score: float = 0.0
) -> int:
    """Push ``messages`` to the start key ``key`` as the spiders read it (``mode``, see
    REDIS_START_URLS_AS_SET / _AS_ZSET): RPUSH to a list, SADD to a set, ZADD with
    ``score`` to a sorted set; a command per :data:`PUSH_BATCH`. How many were added (a
    set or sorted set adds a message it holds already once)."""
    added = 0
    for start in range(0, len(messages), PUSH_BATCH):
        batch = list(messages[start : start + PUSH_BATCH])
        if mode == "set":
            added += int(server.sadd(key, *batch))
        elif mode == "zset":
            added += int(server.zadd(key, dict.fromkeys(batch, score)))
        else:
            server.rpush(key, *batch)
            added += len(batch)
    return added


def recover_expired(
    server: Any, base_key: str, worker_timeout: float, max_deliveries: int
) -> Recovery:
    """Recover every expired lease of ``base_key`` (a queue, a lane, or a spider's first
    start key) as a worker's heartbeat does (``lua/lease_expired.lua``,
    ``lua/lease_requeue.lua``: a delivery is counted; an entry delivered
    ``max_deliveries`` times goes to the dead letters), pass after pass (a pass recovers
    up to 500 leases) until none is left."""
    book = LeaseBook(server, base_key, new_worker_id(), worker_timeout, max_deliveries)
    requeued = dead = 0
    while True:
        recovery = book.recover_expired()
        if recovery == (0, 0):
            return Recovery(requeued, dead)
        requeued, dead = requeued + recovery.requeued, dead + recovery.dead_lettered
