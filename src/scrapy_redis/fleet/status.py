"""A read-only view of a crawl in Redis: what ``scrapy redis status``, ``watch`` and the
dashboard show.

:func:`crawl_status` reads, for one spider of a project, its queue (every lane of a
crawl split with SCHEDULER_SHARDS), the leases workers hold on it, the entries set
aside, its start keys, duplicate filter, items list, worker registry and stats (the
fleet's and each worker's), and says in one line why workers idle while work exists
(see :mod:`scrapy_redis.fleet.diagnosis`). It writes nothing.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import load_object

from scrapy_redis.connection import describe_server
from scrapy_redis.core.logsafe import shorten
from scrapy_redis.fleet.crawl_keys import CrawlKeys, crawl_keys
from scrapy_redis.fleet.diagnosis import diagnose
from scrapy_redis.fleet.later import bloom_generations, due_later, expiring, lean_size
from scrapy_redis.fleet.queue_lengths import queue_lengths
from scrapy_redis.fleet.snapshot import CrawlStatus, WorkerStatus
from scrapy_redis.metrics.values import decode_value
from scrapy_redis.politeness.report import slot_views
from scrapy_redis.queues.records import unpack_record
from scrapy_redis.scheduling.workers import registered, server_time_ms
from scrapy_redis.start.recurring import RecurringMessages
from scrapy_redis.store.keys import (
    dead_letters_key,
    invalid_entries_key,
    lean_meta_key,
    lease_deadlines_key,
    leases_key,
    worker_stats_key,
    workers_key,
)
from scrapy_redis.store.redis_values import (
    Reader,
    UnreadableValueError,
    integer,
    number,
    printable,
    shown,
    text_of,
)

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

__all__ = ["CrawlStatus", "WorkerStatus", "crawl_status", "project_spiders", "unreadable_status"]

#: The fleet's stats other views read as numbers (said unreadable if they are not).
NUMBERS = ("response_received_count", "item_scraped_count")
#: The stats the workers write as times.
TIMES = ("start_time", "finish_time")


def spider_loader(settings: BaseSettings) -> Any:
    """The project's spider loader (SPIDER_LOADER_CLASS), built as Scrapy builds it
    (``scrapy.spiderloader.get_spider_loader()``, which Scrapy 2.13 does not have)."""
    return load_object(settings["SPIDER_LOADER_CLASS"]).from_settings(settings.frozencopy())


def project_spiders(settings: BaseSettings) -> list[type]:
    """The spider classes of the project of ``settings``, by name."""
    loader = spider_loader(settings)
    return [loader.load(name) for name in sorted(loader.list())]


def crawl_status(
    server: Any, settings: BaseSettings, spidercls: type, now: float | None = None
) -> CrawlStatus:
    """What Redis holds of the crawl of ``spidercls`` under the project's ``settings``
    (and the spider's own ``custom_settings``). ``now``: the server's clock (seconds).
    What cannot be read (a key of another type, a value that is not what the workers
    write) is left out and listed in ``unreadable``; the rest is read all the same."""
    problems: list[str] = []
    keys = crawl_keys(server, settings, spidercls, problems)
    now = server_time_ms(server) / 1000 if now is None else now
    status = CrawlStatus(keys.spider, keys.queue_key, keys.queue_class_name, lanes=keys.lanes)
    status.server = printable(describe_server(server))
    status.read_at = now
    status.unreadable = problems
    reader = Reader(server, problems)
    _read_registry(reader, keys, status, now)
    if keys.queue_keys:
        _read_queue(reader, keys, status, now)
    _read_start_keys(reader, keys, status, now)
    _read_recurring(reader, keys, status)
    _read_worker_stats(reader, keys, status)
    status.fingerprints = _fingerprints(reader, keys, now) if keys.queue_keys else None
    _read_later(reader, keys, status, now)
    status.items = _items(reader, keys.items_key)
    status.stats = _decoded_hash(reader, keys.stats_key)
    status.start_invalid = _stat_count(reader, keys.stats_key, status.stats)
    status.slots = slot_views(server, keys.queue_keys, keys.cluster, now)  # politeness/
    if status.queue_redis_type == "none" and (status.slots or status.queued):
        status.queue_class = "SlotQueue"  # queued per download slot (SCHEDULER_FLEET_LIMITS)
    status.diagnosis = diagnose(status, keys)
    return status


def unreadable_status(spider: str, server: Any, problem: str) -> CrawlStatus:
    """The status of a crawl none of which could be read (``problem`` says why: a key
    and what it holds)."""
    status = CrawlStatus(spider, queue_key="", queue_class="", lanes=0)
    status.server = printable(describe_server(server))
    status.unreadable = [problem]
    return status


def _read_queue(reader: Reader, keys: CrawlKeys, status: CrawlStatus, now: float) -> None:
    by_priority: dict[int, int] = {}
    for lane, queue_key in enumerate(keys.queue_keys):
        kind, total, priorities = queue_lengths(reader.server, queue_key, keys.cluster, reader)
        if lane == 0:  # (the lanes are of one class: the first tells)
            status.queue_redis_type = kind
        status.queued += total
        for priority, count in (priorities or {}).items():
            by_priority[priority] = by_priority.get(priority, 0) + count
        leased, expired = _leases(reader, queue_key, keys.cluster, now)
        for worker, count in leased.items():
            _worker(status, worker).leased += count
            status.leased += count
        status.expired_leases += expired
        status.invalid += reader.llen(invalid_entries_key(queue_key, keys.cluster))
        status.dead_letters += reader.llen(dead_letters_key(queue_key, keys.cluster))
    if keys.queue_class_name == "PriorityQueue" or by_priority:
        status.queued_by_priority = dict(sorted(by_priority.items(), reverse=True))


def _read_later(reader: Reader, keys: CrawlKeys, status: CrawlStatus, now: float) -> None:
    """The requests due later and the fingerprints that expire (fleet/later.py)."""
    if keys.queue_keys:
        status.due_later = due_later(reader, keys.queue_keys, keys.cluster, now)
        status.expiring = expiring(reader, keys.filter_keys, keys.cluster, now)


def _read_start_keys(reader: Reader, keys: CrawlKeys, status: CrawlStatus, now: float) -> None:
    status.start_keys = list(keys.start_keys)
    if not keys.start_keys:
        return
    for key in keys.start_keys:
        kind = reader.type(key)
        status.start_key_types[key] = kind
        status.start_pending += _length(reader, key, kind)
    base = keys.start_keys[0]  # the first start key names the lease keys
    leased, _ = _leases(reader, base, keys.cluster, now)
    for worker, count in leased.items():
        _worker(status, worker).start_leased += count
        status.start_leased += count
    status.dead_letters += reader.llen(dead_letters_key(base, keys.cluster))
    status.start_set_aside = reader.llen(invalid_entries_key(base, keys.cluster))


#: Recurring start messages listed by the status (the count covers them all).
RECURRING_LISTED = 20


def _read_recurring(reader: Reader, keys: CrawlKeys, status: CrawlStatus) -> None:
    """The recurring start messages (start/recurring.py): their count, the first ones."""
    if not keys.start_keys:
        return
    recurring = RecurringMessages(reader.server, keys.start_keys[0])
    status.recurring = reader.read(recurring.key, "sorted set", recurring.count, 0)
    first = reader.read(recurring.key, "sorted set", lambda: recurring.listed(RECURRING_LISTED), [])
    status.recurring_next = [_recurring_view(one.to_json()) for one in first]


def _recurring_view(one: dict[str, Any]) -> dict[str, Any]:
    """A recurring message as status shows it: printable and short; a number written by
    hand that is no time nor interval (inf, nan) as None."""
    view = {
        name: value if math.isfinite(value) else None
        for name, value in one.items()
        if name != "message"
    }
    return {"message": printable(shorten(one["message"], 200)), **view}


def _length(reader: Reader, key: str, kind: str) -> int:
    lengths = {"list": reader.llen, "set": reader.scard, "zset": reader.zcard}
    return lengths[kind](key) if kind in lengths else 0


def _leases(reader: Reader, base_key: str, cluster: bool, now: float) -> tuple[dict[str, int], int]:
    """Entries held under lease on ``base_key`` (not done yet), per worker id; and how
    many of them are under a lease whose deadline passed (requests, not leases)."""
    counts: dict[str, int] = {}
    deadlines = lease_deadlines_key(base_key, cluster)
    expired = {
        text_of(lease_id)
        for lease_id in reader.read(
            deadlines,
            "sorted set",
            lambda: reader.server.zrangebyscore(deadlines, "-inf", int(now * 1000)),
            [],
        )
    }
    held_expired = 0
    for lease_id, raw in reader.hgetall(leases_key(base_key, cluster)).items():
        lease = text_of(lease_id)
        worker = lease.rsplit(":", 1)[0]
        try:
            held = sum(1 for entry in unpack_record(raw).entries if entry is not False)
        except Exception:  # a malformed record is still a lease
            held = 0
        counts[worker] = counts.get(worker, 0) + held
        held_expired += held if lease in expired else 0
    return counts, held_expired


def _fingerprints(reader: Reader, keys: CrawlKeys, now: float) -> int | None:
    counts = [_filter_size(reader, key, keys.cluster, now) for key in keys.filter_keys]
    known = [count for count in counts if count is not None]
    return sum(known) if known else None


def _filter_size(reader: Reader, key: str, cluster: bool, now: float) -> int | None:
    """The size of the duplicate filter ``key``: a set (SADD filter), a RedisBloom
    filter, or the hash of a Bloom or lean filter's count, or a Bloom filter's live time
    generations, or a lean filter's count and live time generations (see
    later.lean_size()); 0 if there is none of these (an empty crawl); None if it cannot be
    counted."""
    kind = reader.type(key)
    if kind == "set":
        return reader.scard(key)
    if kind == "zset":  # fingerprints that expire (DUPEFILTER_LIFETIME)
        return reader.zcard(key)
    if kind == "MBbloom--":
        return int(reader.server.execute_command("BF.CARD", key))
    if kind == "hash" and (generations := bloom_generations(reader, key, cluster, now)):
        return generations["alive"]  # a Bloom filter's live time generations
    if kind == "none" and (size := lean_size(reader, key, cluster, now)) is not None:
        return size  # a lean filter's own buckets and live time generations
    meta = key if kind == "hash" else lean_meta_key(key, cluster)
    count = reader.hget(meta, "count")
    if count is None:
        return 0 if kind == "none" and reader.type(meta) == "none" else None
    return reader.parse(lambda: integer(count, meta, "count", low=0), None)


def _items(reader: Reader, key: str) -> int | None:
    kind = reader.type(key)
    return 0 if kind == "none" else reader.llen(key) if kind == "list" else _not(reader, key, kind)


def _not(reader: Reader, key: str, kind: str) -> None:
    """None, said to ``reader``: ``key`` holds a ``kind``, not a list."""
    return reader.failed(UnreadableValueError(key, f"a {kind}, not a list"), None)


def _decoded_hash(reader: Reader, key: str) -> dict[str, Any]:
    return {text_of(k): decode_value(v) for k, v in reader.hgetall(key).items()}


def _stat_count(reader: Reader, key: str, stats: dict[str, Any]) -> int:
    """The stats' count of invalid start messages (0: none counted)."""
    name = "redis/start_messages/invalid"
    value = stats.get(name, 0)
    for stat in NUMBERS:  # the counts other views (metrics...) read: said if unusable
        if stat in stats:
            reader.parse(lambda s=stat: number(stats[s], key, s), 0.0)
    for stat in TIMES:
        if stat in stats and not isinstance(stats[stat], datetime):
            reader.failed(UnreadableValueError(key, f"{shown(stats[stat])}, not a time", stat), 0)
    return reader.parse(lambda: integer(value, key, name, low=0), 0)


def _read_registry(reader: Reader, keys: CrawlKeys, status: CrawlStatus, now: float) -> None:
    """The workers in the registry, with their heartbeat (deadline - timeout)."""
    timeout = keys.worker_timeout
    try:
        workers = registered(reader.server, keys.queue_key)
    except UnreadableValueError as exc:
        workers = reader.failed(exc, {})
    for worker_id, deadline_ms in workers.items():
        deadline = deadline_ms / 1000
        worker = _worker(status, worker_id)
        if deadline_ms <= 0:  # not a deadline workers.lua writes: no heartbeat known
            key = workers_key(keys.queue_key, keys.cluster)
            reader.failed(UnreadableValueError(key, "no deadline", worker_id), None)
            continue
        worker.alive = deadline > now
        worker.heartbeat_age = max(0.0, round(now - (deadline - timeout), 3))


def _read_worker_stats(reader: Reader, keys: CrawlKeys, status: CrawlStatus) -> None:
    for worker in status.workers:
        key = worker_stats_key(keys.stats_key, worker.id, keys.cluster)
        worker.stats = _decoded_hash(reader, key)
        worker.pages_per_second = _rate(worker.stats, "worker/pages_per_second")
        worker.items_per_second = _rate(worker.stats, "worker/items_per_second")
        started = worker.stats.get("start_time")
        if started is not None and not isinstance(started, datetime):
            reader.failed(
                UnreadableValueError(key, f"{shown(started)}, not a time", "start_time"), None
            )
    status.workers.sort(key=lambda w: (not w.alive, w.id))


def _rate(stats: dict[str, Any], name: str) -> float | None:
    """A rate from a worker's stats hash (anyone may write there: a value that is not a
    finite number is no rate)."""
    value = stats.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _worker(status: CrawlStatus, worker_id: str) -> WorkerStatus:
    """The entry of ``worker_id`` in ``status`` (made if missing: a worker that left the
    registry, or a spider run without our scheduler, may still hold leases)."""
    for worker in status.workers:
        if worker.id == worker_id:
            return worker
    worker = WorkerStatus(worker_id, heartbeat_age=None, alive=False)
    status.workers.append(worker)
    return worker
