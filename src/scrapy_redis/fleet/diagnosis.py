"""Why workers idle while a crawl still has work: one line for ``scrapy redis status``
and the dashboard (see :mod:`scrapy_redis.fleet.status`).

The original's users most often report "the spider sits idle while Redis still holds
requests", and could not see why. Each rule below looks at a crawl's
:class:`~scrapy_redis.fleet.status.CrawlStatus` for one cause, most specific first; the
first that matches is the diagnosis.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from scrapy_redis.fleet.later import duration
from scrapy_redis.metrics.worker import RATE_WINDOW
from scrapy_redis.store.keys import invalid_entries_key

if TYPE_CHECKING:
    from scrapy_redis.fleet.crawl_keys import CrawlKeys
    from scrapy_redis.fleet.snapshot import CrawlStatus, WorkerStatus

#: The Redis type each of the package's queue classes keeps its requests in.
QUEUE_TYPES = {"PriorityQueue": "zset", "FifoQueue": "list", "LifoQueue": "list"}
#: The Redis type of the start keys per REDIS_START_URLS_AS_SET / _AS_ZSET.
START_TYPES = {"list": "list", "set": "set", "zset": "zset"}

Rule = Callable[["CrawlStatus", "CrawlKeys"], "str | None"]


def diagnose(status: CrawlStatus, keys: CrawlKeys) -> str | None:
    """The first cause of idling that ``status`` shows, or None."""
    for rule in RULES:
        if (line := rule(status, keys)) is not None:
            return line
    return None


def _wrong_queue_type(status: CrawlStatus, keys: CrawlKeys) -> str | None:
    expected = QUEUE_TYPES.get(status.queue_class)
    found = status.queue_redis_type
    if expected is None or found in ("none", expected):
        return None
    return (
        f"{keys.queue_keys[0]} holds a {found}, but SCHEDULER_QUEUE_CLASS = "
        f"{status.queue_class} keeps a {expected}: workers refuse it (another spider's key, "
        "or an old crawl's with another queue class?)"
    )


def _wrong_start_type(status: CrawlStatus, keys: CrawlKeys) -> str | None:
    expected = START_TYPES[keys.start_mode]
    for key, found in status.start_key_types.items():
        if found not in ("none", expected):
            return (
                f"start key {key} holds a {found}, but the workers read a {expected} "
                "(REDIS_START_URLS_AS_SET / REDIS_START_URLS_AS_ZSET must match how you push)"
            )
    return None


def _no_worker(status: CrawlStatus, keys: CrawlKeys) -> str | None:
    if status.workers_alive or not (status.queued or status.start_pending):
        return None
    return (
        f"{status.queued} requests and {status.start_pending} start messages wait, but no "
        f"worker is alive: start one with `scrapy crawl {status.spider}`"
    )


def _expired_leases(status: CrawlStatus, keys: CrawlKeys) -> str | None:
    if not status.expired_leases:
        return None
    return (
        f"{status.expired_leases} requests are held under leases of workers that stopped "
        "responding: a live worker puts them back at its next heartbeat (a third of "
        f"SCHEDULER_WORKER_TIMEOUT), or now with `scrapy redis requeue {status.spider}`"
    )


def _leased_elsewhere(status: CrawlStatus, keys: CrawlKeys) -> str | None:
    idle = _idle_workers(status)
    if status.queued or not status.leased or not idle:
        return None
    holders = [f"{w.id} ({w.leased})" for w in status.workers if w.leased]
    return (
        f"the queue is empty: the {status.leased} requests left are leased by "
        f"{', '.join(holders)}; {len(idle)} idle worker(s) wait for them and for the requests "
        "their pages yield"
    )


def _start_unread(status: CrawlStatus, keys: CrawlKeys) -> str | None:
    if not status.start_pending or status.start_leased or status.queued or status.leased:
        return None
    if not status.workers_alive:
        return None
    return (
        f"{status.start_pending} start messages wait in {', '.join(status.start_keys)} but "
        f"no worker reads them: do the workers run {status.spider} (a RedisSpider) with "
        "these start keys?"
    )


def _invalid_entries(status: CrawlStatus, keys: CrawlKeys) -> str | None:
    if not status.invalid or status.queued:
        return None
    where = invalid_entries_key(keys.queue_keys[0], keys.cluster)
    if keys.lanes > 1:
        where = f"{where} and the other lanes' lists"
    return (
        f"{status.invalid} queue entries were set aside as undecodable ({where}; check "
        f"SCHEDULER_SERIALIZER): once fixed, `scrapy redis requeue {status.spider} "
        "--invalid` puts them back"
    )


def _due_later(status: CrawlStatus, keys: CrawlKeys) -> str | None:
    """Nothing to fetch now, but requests are due later (fleet/later.py)."""
    due = status.due_later
    if not due or not due["count"] or status.queued or status.leased:
        return None
    if due["due_now"] and not status.workers_alive:
        return (
            f"{due['due_now']} requests due later are due, but no worker is alive to move "
            f"them into the queue: start one with `scrapy crawl {status.spider}`"
        )
    if due["due_now"]:
        return None  # a live worker moves them within a second
    then = (
        "workers stay open for those due within MAX_IDLE_TIME_BEFORE_CLOSE"
        if status.workers_alive
        else f"no worker is alive: start one by then with `scrapy crawl {status.spider}`"
    )
    later = due["next_due_in"]  # (None: due at +inf, which anyone may write)
    when = "never" if later is None else f"in {duration(later)}"
    return (
        f"nothing to fetch now: {due['count']} requests are due later, the next {when} "
        f"(by the Redis server's clock); {then}"
    )


def _idle_with_work(status: CrawlStatus, keys: CrawlKeys) -> str | None:
    # Only workers whose own stats say they fetched nothing for a whole rate window (a
    # worker that has not written its rate yet, keeps no per-worker stats, or started
    # less than a minute ago, may be busy).
    idle = [
        w
        for w in _idle_workers(status)
        if w.pages_per_second == 0 and _running_for(w, status.read_at) > RATE_WINDOW
    ]
    if not status.queued or not idle:
        return None
    names = ", ".join(worker.id for worker in idle)
    return (
        f"{status.queued} requests wait, but {names} fetched nothing for a minute and "
        "holds no lease: check its log (downloader delays, DOWNLOAD_SLOTS, an engine "
        "waiting on its start requests)"
    )


def _running_for(worker: WorkerStatus, now: float) -> float:
    """Seconds since the worker's spider opened (its ``start_time`` stat); 0 if unknown."""
    started = worker.stats.get("start_time")
    return now - started.timestamp() if isinstance(started, datetime) else 0.0


def _idle_workers(status: CrawlStatus) -> list[WorkerStatus]:
    """Live workers holding no lease (a worker fetching holds its prefetched batch)."""
    return [worker for worker in status.workers if worker.alive and not worker.leased]


def shared_delay(status: CrawlStatus, keys: CrawlKeys) -> str | None:
    """Several workers apply DOWNLOAD_DELAY each to their own downloads (fleet-wide
    limits off): a site they all crawl sees up to that many times the configured rate."""
    workers = status.workers_alive
    delay = keys.download_delay
    if keys.fleet_limits or delay <= 0 or workers < 2:
        return None
    return (
        f"{workers} workers each apply DOWNLOAD_DELAY = {delay:g} to their own downloads: a "
        f"site they all crawl sees up to {workers} times the configured rate "
        f"({workers / delay:.3g} requests a second instead of {1 / delay:.3g}). Set "
        "SCHEDULER_FLEET_LIMITS = True to hold it for the whole fleet."
    )


RULES: list[Rule] = [
    _wrong_queue_type,
    _wrong_start_type,
    _no_worker,
    _expired_leases,
    _leased_elsewhere,
    _start_unread,
    _invalid_entries,
    _due_later,
    _idle_with_work,
    shared_delay,  # (not a cause of idling: a warning, when nothing else is wrong)
]
