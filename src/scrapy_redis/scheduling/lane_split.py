"""How many lanes a crawl is split into (SCHEDULER_SHARDS, or the Redis Cluster's masters),
checked against the count its data was recorded with, and the scheduler's queue split into
a :class:`~scrapy_redis.scheduling.lanes.LanedQueue` (see :mod:`scrapy_redis.scheduling.lanes`)."""

from __future__ import annotations

from typing import Any

from scrapy_redis.connection import is_cluster
from scrapy_redis.exceptions import ConfigurationError
from scrapy_redis.queue import Base
from scrapy_redis.scheduling.lanes import LanedQueue
from scrapy_redis.store.keys import (
    format_key,
    lane_filter_key,
    lane_queue_key,
    lane_tags,
    lanes_key,
    lease_deadlines_key,
    leases_key,
)
from scrapy_redis.store.scripts import script

#: The most lanes a crawl may have (tags are searched for in slot ranges of 16384 / lanes).
MAX_LANES = 1024


def lane_count(scheduler: Any, queue: Any, dupefilter: Any) -> int:
    """How many lanes the scheduler's crawl is split into: SCHEDULER_SHARDS; when it is
    not set, on a Redis Cluster, the count the crawl's data has (recorded by its first
    worker) or else the cluster's masters now (one lane each: the tags take the slot
    ranges in turn; 1 if the queue or the filter cannot be split); 1 on one Redis."""
    setting = scheduler.shards
    if setting is not None and not 1 <= setting <= MAX_LANES:
        raise ConfigurationError(
            f"SCHEDULER_SHARDS = {setting!r} must be 1 to {MAX_LANES} (as many as the "
            "cluster has masters spreads a crawl over them)."
        )
    wanted = setting if setting is not None else _cluster_default(scheduler.server, queue)
    if wanted == 1:
        return 1
    problem = _unsplittable(queue, dupefilter)
    if problem is None:
        return int(wanted)
    if setting is None:
        return 1
    raise ConfigurationError(f"SCHEDULER_SHARDS = {setting}, but {problem}")


def _cluster_default(server: Any, queue: Any) -> int:
    """Not set: 1 on one Redis; on a cluster the crawl's recorded count, else its masters."""
    if not is_cluster(server) or "{" in queue.key or "}" in queue.key:
        return 1
    recorded = server.get(lanes_key(queue.key, cluster=True))
    if recorded is not None:
        return min(int(recorded), MAX_LANES)
    if server.exists(queue.key, leases_key(queue.key, cluster=True)):
        return 1  # a crawl kept without lanes goes on as it is
    return max(1, min(len(server.get_primaries()), MAX_LANES))


def _unsplittable(queue: Any, dupefilter: Any) -> str | None:
    """Why the crawl cannot be split into lanes, or None."""
    if not (isinstance(queue, Base) and queue.uses_leases and queue.uses_push_script):
        return (
            f"the queue class {type(queue).__name__} cannot be split into lanes (those of "
            "scrapy_redis.queue can). Set SCHEDULER_SHARDS = 1."
        )
    if not (getattr(dupefilter, "checks_in_script", False) and hasattr(dupefilter, "for_lane")):
        return (
            f"the duplicate filter {type(dupefilter).__name__} cannot be split into lanes "
            "(those of scrapy_redis.dupefilter can). Set SCHEDULER_SHARDS = 1."
        )
    if "{" in queue.key or "}" in queue.key:
        return (
            f"the queue key {queue.key!r} has a hash tag, and each lane needs its own. Remove "
            "the tag from SCHEDULER_QUEUE_KEY, or set SCHEDULER_SHARDS = 1."
        )
    return None


def check_lane_count(server: Any, queue: Any, dupefilter: Any, record: bool = False) -> None:
    """Refuse (:class:`ConfigurationError`) a worker whose lane count is not that of the
    crawl's data: the requests and fingerprints of other lanes would not be read. With
    ``record``, a split crawl's count is stored if no worker did (``lanes_record.lua``:
    one step, so two workers cannot each find no count and no data)."""
    count = len(queue.lanes) if isinstance(queue, LanedQueue) else 1
    cluster = is_cluster(server)
    keys = [lanes_key(queue.key, cluster)]
    if count > 1:  # a crawl not split has data there (all in the queue key's slot)
        keys += [queue.key, leases_key(queue.key, cluster), lease_deadlines_key(queue.key, cluster)]
        keys += [key for key, _ in dupefilter.key_types()]
    found = int(script("lanes_record")(server, keys, [count, "1" if record else "0"]))
    if found == count:
        return
    if found == 1:
        raise ConfigurationError(
            f"SCHEDULER_SHARDS = {count}, but {queue.key} holds the data of a crawl not split "
            "into lanes (requests, leases or fingerprints). Set SCHEDULER_SHARDS = 1 to go on "
            "with it, or move it (python -m scrapy_redis.move_crawl)."
        )
    raise ConfigurationError(
        f"This crawl's data ({queue.key}) is split into {found} lanes, and these settings "
        f"give {count} (SCHEDULER_SHARDS): set SCHEDULER_SHARDS = {found} on every worker, "
        "or delete the crawl's data to start over."
    )


def split_into_lanes(scheduler: Any, spider: Any, queue: Any) -> Any:
    """The scheduler's queue: ``queue`` itself, or a :class:`LanedQueue` of queues of its
    class, with a filter each made from the scheduler's (see :func:`lane_count`)."""
    count = lane_count(scheduler, queue, scheduler.df)
    if count == 1:
        return queue
    tags = lane_tags(queue.key, count)
    filter_key = format_key(scheduler.dupefilter_key, spider.name)
    lanes = [
        type(queue)(
            server=scheduler.server,
            spider=spider,
            key=lane_queue_key(tag),
            serializer=scheduler.serializer,
        )
        for tag in tags
    ]
    filters = [scheduler.df.for_lane(lane_filter_key(filter_key, tag), count) for tag in tags]
    return LanedQueue(queue.key, lanes, filters)
