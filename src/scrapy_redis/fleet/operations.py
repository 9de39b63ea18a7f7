"""What the fleet tools change in Redis, for ``scrapy redis`` and the dashboard alike:
push start messages, recover what dead workers held, purge a queue. Each change is one
Redis command or one of the package's Lua scripts; none needs a running crawl."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from scrapy_redis.connection import is_cluster
from scrapy_redis.core.logsafe import short_repr, shorten
from scrapy_redis.exceptions import InvalidStartMessageError, ScrapyRedisError
from scrapy_redis.queues.leases import LeaseBook, Recovery, lease_flush_keys
from scrapy_redis.queues.priority import priority_of_member
from scrapy_redis.scheduling.workers import new_worker_id
from scrapy_redis.start.messages import StartMessageRules, check_start_message
from scrapy_redis.store.keys import (
    derived_pattern,
    due_key,
    moving_key,
    priority_list_key,
    slot_queue_keys,
    slot_store_keys,
)
from scrapy_redis.store.scripts import script
from scrapy_redis.utils import bytes_to_str

#: Start messages sent by one command.
PUSH_BATCH = 1000
#: Calls of ``lua/queue_purge.lua`` per queue: each one learns the priorities pushed
#: since the one before, so only workers adding new priorities all the time exhaust them.
PURGE_ATTEMPTS = 10


def push_messages(
    server: Any,
    key: str,
    mode: str,
    messages: Sequence[str],
    score: float = 0.0,
    check: MessageCheck | None = None,
) -> int:
    """Push ``messages`` to the start key ``key`` as the spiders read it (``mode``, see
    REDIS_START_URLS_AS_SET / _AS_ZSET): RPUSH to a list, SADD to a set, ZADD with
    ``score`` to a sorted set; a command per :data:`PUSH_BATCH`. How many were added (a
    set or sorted set adds a message it holds already once).

    Every message is checked first (:func:`~scrapy_redis.start.messages.check_start_message`,
    with ``check``'s rules and spider; default: the default rules, no spider): one
    refused raises InvalidStartMessageError naming it, and nothing is pushed."""
    check = check or MessageCheck()
    for message in messages:
        check(message)
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


@dataclass(frozen=True)
class MessageCheck:
    """How a start message is checked before it is pushed: ``rules`` (REDIS_START_URLS_*),
    the ``spider`` whose ``make_request_from_data()`` reads it (None: a URL or a JSON
    object with the documented keys), and whether unknown keys pass (``--force``)."""

    rules: StartMessageRules = field(default_factory=StartMessageRules)
    spider: Any = None
    allow_unknown_keys: bool = False

    def __call__(self, message: str) -> None:
        """InvalidStartMessageError naming ``message`` and why it is refused."""
        reason = self.refusal(message)
        if reason is not None:
            raise InvalidStartMessageError(f"{short_repr(message, 200)}: {reason}")

    def refusal(self, message: str) -> str | None:
        """Why ``message`` is refused (None: it may be pushed). Any error of the spider's
        ``make_request_from_data()`` refuses it, as the spider would skip it."""
        try:
            check_start_message(message, self.rules, self.spider, self.allow_unknown_keys)
        except Exception as exc:  # as the spider does: any failure makes the message invalid
            return shorten(exc)
        return None


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


def purge_queue(
    server: Any, queue_key: str, other_keys: Sequence[str] = (), orphans: bool = True
) -> int:
    """Delete the queue (or one lane) ``queue_key``: its requests (a PriorityQueue's index
    and every list it names; or its per-slot queues), their leases and ``other_keys``
    (in the queue's slot), in one call of ``lua/queue_purge.lua``. A worker pushing a
    new priority meanwhile makes the script refuse and name it; it is called again with it (at most
    :data:`PURGE_ATTEMPTS` times). With ``orphans``, priority lists no index names (left by
    a purge of an older version racing a push) are found with SCAN and deleted too. How
    many keys were deleted."""
    cluster = is_cluster(server)
    extra = [*lease_flush_keys(queue_key, cluster), *slot_queue_keys(queue_key, cluster)]
    extra += slot_store_keys(queue_key, cluster)  # (its index's lists: the script finds them)
    # its requests due later (scheduling/due.py) and a move's marks (fleet/move_crawl.py)
    extra += [due_key(queue_key, cluster), moving_key(queue_key, cluster)]
    extra += other_keys  # (the per-slot queues: SCHEDULER_FLEET_LIMITS)
    if orphans:
        extra += scan_keys(server, derived_pattern(queue_key, "prio:", cluster))
        extra += scan_keys(server, derived_pattern(queue_key, "polite:q:", cluster))
    members: list[bytes] = []
    for _ in range(PURGE_ATTEMPTS):
        lists = [_list_of(queue_key, member, cluster) for member in members]
        reply = script("queue_purge")(server, [queue_key, *lists, *extra], members)
        if int(reply[0]) == 1:
            return int(reply[1])
        members += reply[1:]
    raise ScrapyRedisError(
        f"Could not purge {queue_key!r}: workers pushed new priorities during "
        f"{PURGE_ATTEMPTS} attempts. Stop the crawl's workers, then purge again."
    )


def _list_of(queue_key: str, member: bytes, cluster: bool) -> str:
    """The list of the priority the index member ``member`` names."""
    priority = priority_of_member(member)
    if priority is None:  # the script names integers only
        raise ScrapyRedisError(f"{queue_key!r} names no priority {member!r}")
    return priority_list_key(queue_key, priority, cluster)


def scan_keys(server: Any, pattern: str) -> Iterator[str]:
    """The keys matching ``pattern`` (on a Redis Cluster: on every master), with SCAN."""
    for key in server.scan_iter(match=pattern, count=1000):
        yield bytes_to_str(key)
