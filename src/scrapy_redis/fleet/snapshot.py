"""What :func:`scrapy_redis.fleet.status.crawl_status` returns: a crawl, and each of its
workers, as read from Redis at one moment (plain data, JSON-able)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["CrawlStatus", "WorkerStatus"]


@dataclass
class WorkerStatus:
    """One worker of a crawl, as the registry, the leases and its own stats show it."""

    #: The scheduler's worker id, ``<host>:<pid>:<random>``.
    id: str
    #: Seconds since its last heartbeat (None: not in the registry).
    heartbeat_age: float | None
    #: Whether its registry entry has not expired.
    alive: bool
    #: Requests it holds under lease now.
    leased: int = 0
    #: Start messages it holds under lease now.
    start_leased: int = 0
    pages_per_second: float | None = None
    items_per_second: float | None = None
    #: Its own stats (the per-worker hash), {} if none.
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class CrawlStatus:
    """One spider's crawl in Redis."""

    spider: str
    queue_key: str
    queue_class: str
    #: The Redis type of the queue key ("none" when absent).
    queue_redis_type: str = "none"
    #: Requests waiting in the queue (every lane).
    queued: int = 0
    #: PriorityQueue only: requests waiting per priority.
    queued_by_priority: dict[int, int] | None = None
    #: Requests leased by workers.
    leased: int = 0
    #: Of those, the ones under leases whose deadline passed (their worker is gone):
    #: requests, as ``leased`` counts them (not leases).
    expired_leases: int = 0
    #: Queue entries set aside as undecodable (``<queue>:invalid``).
    invalid: int = 0
    #: Entries moved to the dead letters (queue and start keys).
    dead_letters: int = 0
    lanes: int = 1
    start_keys: list[str] = field(default_factory=list)
    #: The Redis type of each start key ("none" when absent).
    start_key_types: dict[str, str] = field(default_factory=dict)
    start_pending: int = 0
    start_leased: int = 0
    #: Start messages skipped as invalid (stat ``redis/start_messages/invalid``).
    start_invalid: int = 0
    #: Start messages set aside as invalid (``<first start key>:invalid``).
    start_set_aside: int = 0
    #: Recurring start messages (``<first start key>:recurring``): how many.
    recurring: int = 0
    #: The first of them, next due first: {"message", "every" (s), "next_run" (POSIX s)}.
    recurring_next: list[dict[str, Any]] = field(default_factory=list)
    #: Fingerprints in the duplicate filter (None: a filter this view cannot count).
    fingerprints: int | None = None
    #: Requests due later (fleet/later.py: count, due_now, next_due_at, next_due_in).
    due_later: dict[str, Any] | None = None
    #: Fingerprints that expire (DUPEFILTER_LIFETIME, fleet/later.py); None: none do.
    expiring: dict[str, Any] | None = None
    #: Items in RedisPipeline's list (None: no such list).
    items: int | None = None
    workers: list[WorkerStatus] = field(default_factory=list)
    #: SCHEDULER_FLEET_LIMITS: the busiest download slots (scrapy_redis.politeness.report).
    slots: list[dict[str, Any]] = field(default_factory=list)
    #: The fleet's stats (STATS_KEY).
    stats: dict[str, Any] = field(default_factory=dict)
    diagnosis: str | None = None
    #: When it was read: the Redis server's clock, POSIX seconds.
    read_at: float = 0.0
    #: The Redis it was read from (``redis://host:port/db``, no password).
    server: str = ""
    #: What could not be read, one line each (the key, what it holds); left out above.
    unreadable: list[str] = field(default_factory=list)

    @property
    def workers_alive(self) -> int:
        return sum(1 for worker in self.workers if worker.alive)

    def to_json(self) -> dict[str, Any]:
        """Everything above as JSON-able values (priorities as string keys)."""
        data = asdict(self)
        if not self.lanes:  # the lanes are unknown: so are the queue's numbers
            for name in ("queued", "leased", "expired_leases", "invalid", "fingerprints"):
                data[name] = None
        if self.queued_by_priority is not None:
            data["queued_by_priority"] = {str(p): n for p, n in self.queued_by_priority.items()}
        data["workers_alive"] = self.workers_alive
        data["stats"] = _jsonable(self.stats)
        for worker in data["workers"]:
            worker["stats"] = _jsonable(worker["stats"])
        return data


def _jsonable(stats: dict[str, Any]) -> dict[str, Any]:
    """Stats as JSON values: datetimes and the like as text, and so are the floats JSON
    has no number for (``nan``, ``inf``: read from Redis, where anyone may write)."""
    return {name: _json_value(value) for name, value in stats.items()}


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value if isinstance(value, (int, float, str, bool, type(None))) else str(value)
