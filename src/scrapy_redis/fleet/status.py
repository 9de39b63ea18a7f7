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
from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import load_object

from scrapy_redis.fleet.crawl_keys import CrawlKeys, crawl_keys
from scrapy_redis.fleet.diagnosis import diagnose
from scrapy_redis.fleet.queue_lengths import queue_lengths
from scrapy_redis.fleet.snapshot import CrawlStatus, WorkerStatus
from scrapy_redis.metrics.values import decode_value
from scrapy_redis.queues.records import unpack_record
from scrapy_redis.scheduling.workers import registered, server_time_ms
from scrapy_redis.store.keys import (
    dead_letters_key,
    invalid_entries_key,
    lean_meta_key,
    lease_deadlines_key,
    leases_key,
    worker_stats_key,
)
from scrapy_redis.utils import bytes_to_str

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

__all__ = ["CrawlStatus", "WorkerStatus", "crawl_status", "project_spiders"]


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
    (and the spider's own ``custom_settings``). ``now``: the server's clock (seconds)."""
    keys = crawl_keys(server, settings, spidercls)
    now = server_time_ms(server) / 1000 if now is None else now
    status = CrawlStatus(keys.spider, keys.queue_key, keys.queue_class_name, lanes=keys.lanes)
    status.read_at = now
    _read_registry(server, keys, status, now)
    _read_queue(server, keys, status, now)
    _read_start_keys(server, keys, status)
    _read_worker_stats(server, keys, status)
    status.fingerprints = _fingerprints(server, keys)
    status.items = _items(server, keys.items_key)
    status.stats = _decoded_hash(server, keys.stats_key)
    status.start_invalid = int(status.stats.get("redis/start_messages/invalid", 0) or 0)
    status.diagnosis = diagnose(status, keys)
    return status


def _read_queue(server: Any, keys: CrawlKeys, status: CrawlStatus, now: float) -> None:
    by_priority: dict[int, int] = {}
    for lane, queue_key in enumerate(keys.queue_keys):
        kind, total, priorities = queue_lengths(server, queue_key, keys.cluster)
        if lane == 0:  # (the lanes are of one class: the first tells)
            status.queue_redis_type = kind
        status.queued += total
        for priority, count in (priorities or {}).items():
            by_priority[priority] = by_priority.get(priority, 0) + count
        leased = _leased_by_worker(server, queue_key, keys.cluster)
        for worker, count in leased.items():
            _worker(status, worker).leased += count
            status.leased += count
        status.expired_leases += _expired(server, queue_key, keys.cluster, now)
        status.invalid += int(server.llen(invalid_entries_key(queue_key, keys.cluster)))
        status.dead_letters += int(server.llen(dead_letters_key(queue_key, keys.cluster)))
    if keys.queue_class_name == "PriorityQueue" or by_priority:
        status.queued_by_priority = dict(sorted(by_priority.items(), reverse=True))


def _read_start_keys(server: Any, keys: CrawlKeys, status: CrawlStatus) -> None:
    status.start_keys = list(keys.start_keys)
    if not keys.start_keys:
        return
    for key in keys.start_keys:
        kind = bytes_to_str(server.type(key))
        status.start_key_types[key] = kind
        status.start_pending += _length(server, key, kind)
    base = keys.start_keys[0]  # the first start key names the lease keys
    for worker, count in _leased_by_worker(server, base, keys.cluster).items():
        _worker(status, worker).start_leased += count
        status.start_leased += count
    status.dead_letters += int(server.llen(dead_letters_key(base, keys.cluster)))


def _length(server: Any, key: str, kind: str) -> int:
    lengths = {"list": server.llen, "set": server.scard, "zset": server.zcard}
    return int(lengths[kind](key)) if kind in lengths else 0


def _leased_by_worker(server: Any, base_key: str, cluster: bool) -> dict[str, int]:
    """Entries held under lease on ``base_key`` (not done yet), per worker id."""
    counts: dict[str, int] = {}
    for lease_id, raw in server.hgetall(leases_key(base_key, cluster)).items():
        worker = bytes_to_str(lease_id).rsplit(":", 1)[0]
        try:
            held = sum(1 for entry in unpack_record(raw).entries if entry is not False)
        except Exception:  # a malformed record is still a lease
            held = 0
        counts[worker] = counts.get(worker, 0) + held
    return counts


def _expired(server: Any, base_key: str, cluster: bool, now: float) -> int:
    """How many leases on ``base_key`` are past their deadline."""
    return int(server.zcount(lease_deadlines_key(base_key, cluster), "-inf", int(now * 1000)))


def _fingerprints(server: Any, keys: CrawlKeys) -> int | None:
    counts = [_filter_size(server, key, keys.cluster) for key in keys.filter_keys]
    known = [count for count in counts if count is not None]
    return sum(known) if known else None


def _filter_size(server: Any, key: str, cluster: bool) -> int | None:
    """The size of the duplicate filter ``key``: a set (SADD filter) or sorted set, a RedisBloom
    filter, or the hash of a Bloom or lean filter's count; None if none of these."""
    kind = bytes_to_str(server.type(key))
    if kind == "set":
        return int(server.scard(key))
    if kind == "zset":  # fingerprints that expire (DUPEFILTER_LIFETIME)
        return int(server.zcard(key))
    if kind == "MBbloom--":
        return int(server.execute_command("BF.CARD", key))
    meta = key if kind == "hash" else lean_meta_key(key, cluster)
    count = server.hget(meta, "count")
    return None if count is None else int(count)


def _items(server: Any, key: str) -> int | None:
    kind = bytes_to_str(server.type(key))
    return int(server.llen(key)) if kind == "list" else None


def _decoded_hash(server: Any, key: str) -> dict[str, Any]:
    return {bytes_to_str(k): decode_value(v) for k, v in server.hgetall(key).items()}


def _read_registry(server: Any, keys: CrawlKeys, status: CrawlStatus, now: float) -> None:
    """The workers in the registry, with their heartbeat (deadline - timeout)."""
    timeout = keys.worker_timeout
    for worker_id, deadline_ms in registered(server, keys.queue_key).items():
        deadline = deadline_ms / 1000
        worker = _worker(status, worker_id)
        worker.alive = deadline > now
        worker.heartbeat_age = max(0.0, round(now - (deadline - timeout), 3))


def _read_worker_stats(server: Any, keys: CrawlKeys, status: CrawlStatus) -> None:
    for worker in status.workers:
        worker.stats = _decoded_hash(
            server, worker_stats_key(keys.stats_key, worker.id, keys.cluster)
        )
        worker.pages_per_second = _rate(worker.stats, "worker/pages_per_second")
        worker.items_per_second = _rate(worker.stats, "worker/items_per_second")
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
