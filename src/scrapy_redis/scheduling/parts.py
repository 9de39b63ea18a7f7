"""The parts of one scheduler, built and wired together (see scheduler.py).

:func:`assemble` builds them in ``Scheduler.open()``, from the scheduler's
settings, queue and filter; :func:`assemble_plain` builds them for a subclass
whose ``open()`` is its own (the original's way: the queue's ``pop()``, the
filter's ``request_seen()``, no leases, no registry).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Protocol

from redis.exceptions import RedisError

from scrapy_redis.connection import is_cluster, server_identity
from scrapy_redis.core.engine import installed_reactor, wake_engine
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.queue import Base
from scrapy_redis.queues.leases import LeaseBook
from scrapy_redis.scheduling.context import SchedulerContext
from scrapy_redis.scheduling.due import due_requests
from scrapy_redis.scheduling.enqueue import EnqueueBuffer, LocalQueue, SeenCache
from scrapy_redis.scheduling.feeds import PlainFeed, RequestFeed
from scrapy_redis.scheduling.idle import IdleWatch
from scrapy_redis.scheduling.lanes import LanedFeed, LanedQueue
from scrapy_redis.scheduling.leased_feed import LeasedFeed
from scrapy_redis.scheduling.pacing import DownloaderPacing, Pacer
from scrapy_redis.scheduling.stats import SchedulerStats
from scrapy_redis.scheduling.wakeup import NewsChannel
from scrapy_redis.scheduling.workers import Membership, WorkerRegistry
from scrapy_redis.store.guarded import RedisCalls
from scrapy_redis.store.keys import forgotten_key, lanes_key, news_channel, workers_key
from scrapy_redis.store.keytypes import KeyUse
from scrapy_redis.store.outage import OutageGuard, outage_guard
from scrapy_redis.store.writes import WriteIds

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger("scrapy_redis.scheduler")  # the scheduler's parts log as the scheduler


class Scheduler(Protocol):
    """What the parts read of the scheduler that builds them
    (:class:`scrapy_redis.scheduler.Scheduler`: its settings, queue, filter and clocks).
    A protocol, so this package does not import the facade above it."""

    server: Any
    spider: Spider | None
    crawler: Crawler | None
    stats: Any
    queue: Any
    df: Any
    worker_id: str
    reactor: Any
    clock: Callable[[], float]
    idle_before_close: float
    worker_timeout: float
    max_deliveries: int
    enqueue_delay: float
    enqueue_batch_size: int
    prefetch: int
    seen_cache_size: int


def dedups_in_script(dupefilter: Any, queue: Any) -> bool:
    """Whether the queue's push script checks and records the fingerprints (our filter
    and queue, unless a subclass opted out: see their declared attributes)."""
    return (
        isinstance(dupefilter, RFPDupeFilter)
        and dupefilter.checks_in_script
        and isinstance(queue, Base)
        and queue.uses_push_script
    )


class Parts:
    """One scheduler's parts. The heartbeat, the key lists and the close-time report
    span several of them, so they are here."""

    membership: Membership | None = None

    def __init__(self, context: SchedulerContext, dupefilter: Any, seen: SeenCache) -> None:
        self.context = context
        self.calls = context.calls
        self.counts = context.counts
        self.dupefilter = dupefilter
        #: The filters whose keys the crawl uses: the scheduler's, or its lanes' (lanes.py).
        self.filters = list(getattr(context.queue, "filters", None) or [dupefilter])
        self.seen = seen
        self.local = LocalQueue()
        self.buffer: EnqueueBuffer
        self.feed: RequestFeed
        self.idle: IdleWatch

    def shared_keys(self) -> list[str]:
        """The keys deleted with the crawl: the queue's, the leases', the filter's."""
        queue = self.context.queue
        keys = self.feed.flush_keys()
        if isinstance(queue, LanedQueue):  # how many lanes: see lanes.py
            keys.append(lanes_key(queue.key, is_cluster(queue.server)))
        if self.buffer.due is not None:
            keys += self.buffer.due.keys
        cluster = is_cluster(queue.server)
        forgotten = [forgotten_key(key, cluster) for key in self.filter_keys()]
        return keys + self.filter_keys() + forgotten

    def filter_keys(self) -> list[str]:
        """The key of each filter (lanes' included) that has one."""
        keys = [getattr(dupefilter, "key", None) for dupefilter in self.filters]
        return [key for key in keys if isinstance(key, str)]

    def key_uses(self) -> list[KeyUse]:
        """The keys this worker uses, with their types (see keytypes.py)."""
        uses = [KeyUse(key, kind, "SCHEDULER_QUEUE_KEY") for key, kind in self.feed.key_types()]
        if self.buffer.in_script:  # our filter's keys (a subclass may keep other types)
            for dupefilter in self.filters:
                for key, kind in dupefilter.key_types():
                    uses.append(KeyUse(key, kind, "SCHEDULER_DUPEFILTER_KEY"))
        return uses

    def beat(self) -> None:
        """Every third of SCHEDULER_WORKER_TIMEOUT: renew, push, acknowledge, recover."""
        self.counts.flush_dequeued()
        try:
            self.calls.call(self._beat_once, None)
        except Exception:  # a missed heartbeat must not kill the loop
            logger.warning(
                "Worker heartbeat failed", exc_info=True, extra={"spider": self.context.spider}
            )

    def _beat_once(self) -> None:
        assert self.membership is not None
        self.membership.registry.beat()
        self.buffer.send_now()
        self.feed.maintain()
        if self.buffer.due is not None:
            self.buffer.due.promote(now=True)

    def next_shared(self) -> Any:
        """The next request of the shared queue (None: none now); when it is empty, the
        requests due later that are due by now are made ready first (see due.py)."""
        request = self.feed.next()
        due = self.buffer.due
        if request is None and due is not None and self.calls.call(due.promote, 0):
            request = self.feed.next()
        return request

    def stop_due(self) -> None:
        """Stop making requests due later ready (the scheduler closes)."""
        if self.buffer.due is not None:
            self.buffer.due.stop()

    def clear_due(self) -> None:
        """Delete the requests due later (the crawl is flushed)."""
        if self.buffer.due is not None:
            for key in self.buffer.due.keys:  # (one call each: lanes on a cluster)
                self.context.queue.server.delete(key)

    def due_soon(self) -> bool:
        """Whether a request is due within MAX_IDLE_TIME_BEFORE_CLOSE (see due.py)."""
        due, crawler = self.buffer.due, self.context.crawler
        if due is None:
            return False
        idle = getattr(self.context.spider, "max_idle_time", None)  # a RedisSpider's own
        if idle is None:
            idle = crawler.settings.getfloat("MAX_IDLE_TIME_BEFORE_CLOSE") if crawler else 0.0
        return bool(self.calls.call(lambda: due.pending_within(idle), True))

    def closed_during_outage(self, exc: BaseException) -> None:
        self.calls.guard.failed(exc)
        logger.error(
            "Redis is unreachable while closing (%(error)s): %(unsent)d requests accepted "
            "during the outage are lost; the %(leased)d requests this worker leased go back "
            "to the queue when their lease expires (SCHEDULER_WORKER_TIMEOUT).",
            {"error": exc, "unsent": len(self.buffer), "leased": self.feed.in_hand()},
            extra={"spider": self.context.spider},
        )


def _news(scheduler: Scheduler, queue: Any) -> NewsChannel:
    """The crawl's news channel (see keys.news_channel): ``<queue key>:news`` on one Redis;
    on a Redis Cluster a sharded channel per lane (or the queue's one), in its slot, all
    listened to (each lane's feed and push script publish on the lane's)."""
    server, spider = scheduler.server, scheduler.spider
    if not is_cluster(server):
        return NewsChannel(server, news_channel(queue.key), spider)
    lanes = queue.lanes if isinstance(queue, LanedQueue) else [queue]
    channels = [news_channel(lane.key, cluster=True) for lane in lanes]
    return NewsChannel(server, channels[0], spider, sharded=True, listened=channels)


def _base_parts(scheduler: Scheduler, channel: NewsChannel) -> Parts:
    crawler = scheduler.crawler
    guard = outage_guard(crawler) if crawler is not None else OutageGuard(300)
    # Fingerprints that expire are new again some day: a worker cannot tell from memory.
    expiring = getattr(scheduler.df, "expiry", None) is not None
    cache_size = 0 if expiring else scheduler.seen_cache_size
    seen = SeenCache(cache_size, server_identity(scheduler.server))
    guard.on_recovery(seen.clear)  # Redis may have lost data meanwhile
    calls = RedisCalls(scheduler.server, guard, crawler, scheduler.spider)
    counts = SchedulerStats(scheduler.stats)
    context = SchedulerContext(
        scheduler.queue, calls, counts, channel, crawler, scheduler.spider, scheduler.reactor
    )
    parts = Parts(context, scheduler.df, seen)
    calls.key_uses = parts.key_uses
    cluster = is_cluster(scheduler.server)
    forgotten = [forgotten_key(key, cluster) for key in parts.filter_keys()]
    if forgotten:  # `scrapy redis forget`: drop what this worker remembers (enqueue.py)
        seen.forgets = lambda: _read_all(scheduler.server, forgotten)
    return parts


def _read_all(server: Any, keys: list[str]) -> list[Any]:
    """GET of each of ``keys`` (in several slots of a Redis Cluster: a pipeline)."""
    pipe = server.pipeline(transaction=False)
    for key in keys:
        pipe.get(key)
    return list(pipe.execute())


def _buffer(scheduler: Scheduler, parts: Parts, in_script: bool) -> EnqueueBuffer:
    # A split crawl's batch goes out as a call per lane: SCHEDULER_ENQUEUE_BATCH_SIZE is
    # what each lane gets of a batch, so a batch waits for that many times the lanes.
    lanes = len(getattr(scheduler.queue, "lanes", ())) or 1
    return EnqueueBuffer(
        parts.context,
        scheduler.df,
        in_script,
        parts.seen,
        parts.local,
        scheduler.enqueue_delay,
        scheduler.enqueue_batch_size * lanes,
    )


def assemble_plain(scheduler: Scheduler) -> Parts:
    """The parts of a scheduler whose ``open()`` is a subclass's own."""
    parts = _base_parts(scheduler, NewsChannel(scheduler.server, "", scheduler.spider))
    parts.buffer = _buffer(scheduler, parts, in_script=False)
    parts.feed = PlainFeed(parts.context, parts.buffer.send_now)
    parts.idle = IdleWatch(scheduler.idle_before_close, scheduler.clock)
    return parts


def assemble(scheduler: Scheduler) -> Parts:
    """The parts of an opened scheduler (its queue and filter built)."""
    queue = scheduler.queue
    parts = _base_parts(scheduler, _news(scheduler, queue))
    if isinstance(queue, LanedQueue):  # split (lanes.py): checked in script by construction
        parts.buffer = _buffer(scheduler, parts, True)
        pacing = _pacing(scheduler)  # one worker, one downloader: shared by the lanes
        feeds = [_leased_feed(scheduler, parts, lane, pacing) for lane in queue.lanes]
        parts.feed = LanedFeed(queue, feeds, scheduler.clock)
    elif isinstance(queue, Base) and queue.uses_leases:
        parts.buffer = _buffer(scheduler, parts, dedups_in_script(scheduler.df, queue))
        parts.feed = _leased_feed(scheduler, parts, queue, _pacing(scheduler))
    else:
        parts.buffer = _buffer(scheduler, parts, dedups_in_script(scheduler.df, queue))
        parts.feed = PlainFeed(parts.context, parts.buffer.send_now)
    registry = WorkerRegistry(
        scheduler.server,
        workers_key(queue.key, is_cluster(scheduler.server)),
        scheduler.worker_id,
        scheduler.worker_timeout,
    )
    parts.membership = Membership(
        registry, parts.beat, scheduler.worker_timeout, scheduler.reactor, scheduler.spider
    )
    parts.buffer.due = due_requests(queue, scheduler.df, parts.context.news.name, scheduler.clock)
    if parts.buffer.due is not None:
        parts.buffer.due.start(scheduler.reactor or installed_reactor(), parts.calls.call)
    parts.idle = IdleWatch(scheduler.idle_before_close, scheduler.clock)
    wake = lambda: wake_engine(scheduler.crawler)  # noqa: E731
    parts.idle.attach(parts.feed, parts.calls, wake, parts.context.news, scheduler.reactor)
    return parts


def _pacing(scheduler: Scheduler) -> DownloaderPacing:
    pacer = Pacer(scheduler.prefetch, scheduler.clock)
    first = (getattr(scheduler.queue, "lanes", None) or [scheduler.queue])[0]
    fleet_pacing = getattr(first, "fleet_pacing", None)  # SCHEDULER_FLEET_LIMITS (politeness/)
    if fleet_pacing is not None and (polite := fleet_pacing(scheduler, pacer)):
        return polite
    return DownloaderPacing(pacer, scheduler.crawler, scheduler.spider, scheduler.reactor)


def _leased_feed(
    scheduler: Scheduler, parts: Parts, queue: Base, pacing: DownloaderPacing
) -> LeasedFeed:
    """The leased feed of ``queue`` (the scheduler's, or one of its lanes)."""
    book = LeaseBook(
        scheduler.server,
        queue.key,
        scheduler.worker_id,
        scheduler.worker_timeout,
        scheduler.max_deliveries,
    )
    news = parts.context.news.of_queue(queue.key)  # on a cluster, the lane's own channel
    context = dataclasses.replace(parts.context, queue=queue, news=news)
    return LeasedFeed(context, book, pacing, parts.buffer.send_now)


def fingerprint_count(filters: list[Any]) -> int | None:
    """The fingerprints recorded by ``filters`` (a lane's filters and the scheduler's are
    the same, each counted once); None if one of them cannot tell."""
    total, seen = 0, set()
    for dupefilter in filters:
        key = getattr(dupefilter, "key", None)
        if dupefilter is None or key in seen:
            continue
        seen.add(key)
        try:
            if callable(getattr(dupefilter, "count", None)):
                total += int(dupefilter.count())
            elif isinstance(key, str):
                total += int(dupefilter.server.scard(key))
            else:
                return None
        except (RedisError, TypeError, ValueError, AttributeError):
            return None
    return total


def log_cleared(counts: tuple[int | None, int | None], spider: Any) -> None:
    """The one INFO line of the last worker deleting the crawl's shared data."""
    queued, fingerprints = ("unknown" if n is None else f"{n:,}" for n in counts)
    logger.info(
        "Deleted this crawl's queue (%(queued)s requests) and duplicate filter "
        "(%(fingerprints)s fingerprints): this was the last worker and SCHEDULER_PERSIST "
        "is False (set it to True to keep them for the next crawl)",
        {"queued": queued, "fingerprints": fingerprints},
        extra={"spider": spider},
    )


def forget_filter_writes(filters: list[Any], server: Any) -> None:
    """Delete the write records of filters built with from_spider (a custom queue's push
    records fingerprints with request_seen()): nobody closes these filters, since the
    original's close() deleted the shared fingerprints."""
    for dupefilter in filters:
        writes = getattr(dupefilter, "writes", None)
        if isinstance(writes, WriteIds):
            writes.forget(getattr(dupefilter, "server", server))
