"""The scheduler's counters in Scrapy's stats, by name (``scheduler/...``)."""

from __future__ import annotations

from typing import Any


class SchedulerStats:
    """Counts what the scheduler's parts do, in the crawler's stats collector (if any).

    Requests handed out from the shared queue are counted in batches
    (:meth:`flush_dequeued`: at each pop, when the queue is found empty, on the
    heartbeat and at close): two stat updates per request cost more than the
    rest of handing it out.
    """

    def __init__(self, stats: Any) -> None:
        self.stats = stats
        #: Handed out from the shared queue and not counted yet.
        self.uncounted = 0

    def inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None and count:
            self.stats.inc_value(key, count)

    def flush_dequeued(self) -> None:
        self.inc("scheduler/dequeued/redis", self.uncounted)
        self.inc("scheduler/dequeued", self.uncounted)
        self.uncounted = 0

    def enqueued_to_redis(self, count: int = 1) -> None:
        self.inc("scheduler/enqueued/redis", count)
        self.inc("scheduler/enqueued", count)

    def kept_in_memory(self) -> None:
        """One request the serializer refused, kept in the worker's memory."""
        self.inc("scheduler/unserializable")
        self.inc("scheduler/enqueued/memory")
        self.inc("scheduler/enqueued")

    def dequeued_from_memory(self) -> None:
        self.inc("scheduler/dequeued/memory")
        self.inc("scheduler/dequeued")

    def invalid(self) -> None:
        """One undecodable entry moved to ``<queue>:invalid``."""
        self.inc("scheduler/invalid/redis")

    def leases(self, event: str, count: int) -> None:
        """``scheduler/leases/<event>``: leased, acked, returned, recovered, dead_lettered."""
        self.inc(f"scheduler/leases/{event}", count)
