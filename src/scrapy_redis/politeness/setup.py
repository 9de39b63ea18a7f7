"""Turning fleet-wide limits on (SCHEDULER_FLEET_LIMITS): the scheduler's queue and pacing,
and a crawl persisted in today's layout carried over.

With the setting on, the scheduler's queue is a :class:`SlotQueue` at the same key
(its data under ``<queue key>:polite:*``). Requests that a crawl persisted in the
layout of SCHEDULER_QUEUE_CLASS (or that a recovery of an old lease put back there)
are moved into the per-slot queues by the workers themselves: at their first pop and
every :data:`CHECK_EVERY` seconds after, in batches leased like any pop (a worker
dying half-way loses nothing; at worst a few requests are queued twice).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from scrapy_redis import defaults
from scrapy_redis.connection import is_cluster
from scrapy_redis.exceptions import ConfigurationError, UndecodableRequestError
from scrapy_redis.queues.base import Base, Entry
from scrapy_redis.queues.leases import LeaseBook
from scrapy_redis.scheduling.workers import new_worker_id
from scrapy_redis.store.keys import slot_queue_keys, slot_store_keys

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from scrapy_redis.politeness.queue import SlotQueue

#: Seconds between two looks for requests in the layout of SCHEDULER_QUEUE_CLASS.
CHECK_EVERY = 5.0
#: Requests moved per script call.
MOVE_BATCH = 500


def fleet_limits_on(settings: BaseSettings | None) -> bool:
    """SCHEDULER_FLEET_LIMITS."""
    if settings is None:
        return defaults.SCHEDULER_FLEET_LIMITS
    return settings.getbool("SCHEDULER_FLEET_LIMITS", defaults.SCHEDULER_FLEET_LIMITS)


def fleet_queue(scheduler: Any, spider: Any, queue: Any) -> Any:
    """The scheduler's queue: ``queue`` itself, or with SCHEDULER_FLEET_LIMITS on a
    :class:`SlotQueue` at its key, which carries over what ``queue`` holds."""
    crawler = scheduler.crawler
    if not fleet_limits_on(crawler.settings if crawler is not None else None):
        cluster = is_cluster(scheduler.server)
        pending = (
            [slot_queue_keys(queue.key, cluster)[0], slot_store_keys(queue.key, cluster)[0]]
            if isinstance(queue, Base)
            else None
        )
        if pending is not None and scheduler.server.exists(*pending):
            raise ConfigurationError(
                f"{queue.key} holds requests queued per download slot by workers with "
                "SCHEDULER_FLEET_LIMITS = True, which this worker would not read: set "
                "SCHEDULER_FLEET_LIMITS = True to go on with them."
            )
        return queue
    if not (isinstance(queue, Base) and queue.uses_leases):
        raise ConfigurationError(
            f"SCHEDULER_FLEET_LIMITS = True needs one of scrapy_redis.queue's classes as "
            f"SCHEDULER_QUEUE_CLASS, not {type(queue).__name__}: set SCHEDULER_FLEET_LIMITS "
            "= False, or SCHEDULER_QUEUE_CLASS = 'scrapy_redis.queue.PriorityQueue'."
        )
    from scrapy_redis.politeness.queue import SlotQueue

    polite = SlotQueue(scheduler.server, spider, queue.key, scheduler.serializer)
    polite.carry_over = LegacyMover(queue, polite, scheduler.worker_timeout)
    return polite


class LegacyMover:
    """Moves the requests of the queue of SCHEDULER_QUEUE_CLASS at the same key into the
    per-slot queues (see the module's doc)."""

    def __init__(self, legacy: Base, polite: SlotQueue, timeout: float) -> None:
        self.legacy = legacy
        self.polite = polite
        self.book = LeaseBook(legacy.server, legacy.key, f"move-{new_worker_id()}", timeout)
        self.next_check = 0.0
        self.moved = 0

    def due(self) -> bool:
        return time.monotonic() >= self.next_check

    def move(self) -> int:
        """Move what the legacy queue holds; how many requests were moved."""
        self.next_check = time.monotonic() + CHECK_EVERY
        moved = 0
        while self.legacy.server.exists(self.legacy.key):
            ticket = self.book.ticket()
            entries = self.legacy.pop_entries(MOVE_BATCH, ticket=ticket)
            lease = self.book.taken_batch(ticket, len(entries))
            if lease is None:
                break
            self.polite.push_entries([self._entry(entry) for entry in entries])
            self.book.release([(lease, list(range(1, len(entries) + 1)))])
            moved += len(entries)
        self.moved += moved
        return moved

    def _entry(self, entry: Entry) -> Entry:
        moved = Entry(entry.data, entry.priority)
        try:
            moved.slot = self.polite.limits.slot_of(self.legacy.decode(entry))
        except UndecodableRequestError:
            moved.slot = ""  # set aside when it is handed out
        return moved
