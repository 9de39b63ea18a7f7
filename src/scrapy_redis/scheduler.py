"""The Redis scheduler: one request queue and one duplicate filter shared by many workers.

The :class:`Scheduler` is what Scrapy's engine talks to; the work is done by its
parts, built in :meth:`Scheduler.open`:

* an :class:`~scrapy_redis.enqueue.EnqueueBuffer`: requests accepted and not in
  Redis yet, sent in batches within SCHEDULER_ENQUEUE_DELAY (dedup and push in
  one script call per batch);
* a request feed (:mod:`scrapy_redis.feeds`): leased batches of our queues
  (:class:`~scrapy_redis.leased_feed.LeasedFeed`), or a queue class's own
  ``pop()`` (:class:`~scrapy_redis.feeds.PlainFeed`);
* an :class:`~scrapy_redis.idle.IdleWatch`: the SCHEDULER_IDLE_BEFORE_CLOSE grace
  period, and waking the engine when another worker has news;
* :class:`~scrapy_redis.guarded.RedisCalls`: every Redis call through the outage
  guard, and the stop of the crawl when it cannot go on;
* a :class:`~scrapy_redis.workers.Membership`: the worker registry and heartbeat.

Every Redis call it makes on the reactor thread is a single round trip; it never
blocks waiting for requests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import build_from_crawler

from scrapy_redis import connection, defaults
from scrapy_redis._compat import Derived, PerInstance
from scrapy_redis._engine import wake_engine
from scrapy_redis.connection import server_identity
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.enqueue import BufferParts, EnqueueBuffer, LocalQueue, SeenCache
from scrapy_redis.exceptions import warn_from_settings
from scrapy_redis.feeds import PlainFeed, RequestFeed
from scrapy_redis.guarded import RedisCalls
from scrapy_redis.idle import IdleWatch
from scrapy_redis.keys import format_key, news_channel, workers_key
from scrapy_redis.keytypes import KeyUse, check_key_types
from scrapy_redis.leased_feed import FeedParts, LeasedFeed
from scrapy_redis.leases import LeaseBook
from scrapy_redis.outage import OUTAGE_ERRORS, OutageGuard, outage_guard
from scrapy_redis.pacing import DownloaderPacing, Pacer
from scrapy_redis.queue import Base
from scrapy_redis.scheduler_settings import check_scheduler_args, scheduler_kwargs
from scrapy_redis.scheduler_stats import SchedulerStats
from scrapy_redis.serializers import resolve_serializer
from scrapy_redis.utils import load_configured
from scrapy_redis.wakeup import NewsChannel
from scrapy_redis.workers import Membership, WorkerRegistry, new_worker_id
from scrapy_redis.writes import WriteIds, writes_ttl

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from twisted.internet.defer import Deferred
    from typing_extensions import Self

logger = logging.getLogger(__name__)


def dedups_in_script(dupefilter: Any, queue: Any) -> bool:
    """Whether the queue's push script checks and records the fingerprints (our filter
    and queue, unless a subclass opted out: see their declared attributes)."""
    return (
        isinstance(dupefilter, RFPDupeFilter)
        and dupefilter.checks_in_script
        and isinstance(queue, Base)
        and queue.uses_push_script
    )


class Scheduler:
    """Redis-based scheduler (``SCHEDULER = "scrapy_redis.scheduler.Scheduler"``).

    Settings: SCHEDULER_PERSIST, SCHEDULER_FLUSH_ON_START,
    SCHEDULER_IDLE_BEFORE_CLOSE, SCHEDULER_QUEUE_KEY, SCHEDULER_QUEUE_CLASS,
    SCHEDULER_DUPEFILTER_KEY, DUPEFILTER_CLASS, SCHEDULER_SERIALIZER,
    SCHEDULER_WORKER_TIMEOUT, SCHEDULER_MAX_DELIVERIES, SCHEDULER_ENQUEUE_DELAY,
    SCHEDULER_ENQUEUE_BATCH_SIZE, SCHEDULER_PREFETCH, SCHEDULER_SEEN_CACHE_SIZE.

    Every attribute has a class-level default, for subclasses written for the
    original whose ``__init__`` (and ``open()``) set only the original's: with an
    ``open()`` of their own, requests are popped with the queue's ``pop()`` and
    checked with the filter's ``request_seen()``, as the original did.
    """

    # The original's attributes.
    server: Any = None
    persist = False
    flush_on_start = False
    queue_key = defaults.SCHEDULER_QUEUE_KEY
    queue_cls: Any = defaults.SCHEDULER_QUEUE_CLASS
    df: Any = None
    dupefilter_key = defaults.SCHEDULER_DUPEFILTER_KEY
    dupefilter_cls: Any = defaults.SCHEDULER_DUPEFILTER_CLASS
    idle_before_close: float = 0
    serializer: Any = None
    stats: Any = None
    spider: Spider | None = None
    queue: Any = None
    # Ours.
    worker_timeout: float = defaults.SCHEDULER_WORKER_TIMEOUT
    max_deliveries = defaults.SCHEDULER_MAX_DELIVERIES
    enqueue_delay: float = defaults.SCHEDULER_ENQUEUE_DELAY
    enqueue_batch_size = defaults.SCHEDULER_ENQUEUE_BATCH_SIZE
    prefetch = defaults.SCHEDULER_PREFETCH
    seen_cache_size = defaults.SCHEDULER_SEEN_CACHE_SIZE
    crawler = Derived["Crawler | None"](lambda self: getattr(self.spider, "crawler", None))
    #: After close: whether this worker, the last one, deleted the shared data.
    cleared_shared_data: bool | None = None
    worker_id = PerInstance(lambda _: new_worker_id())
    #: The clock of pacing and of the grace period (seconds).
    clock: Callable[[], float] = staticmethod(time.monotonic)
    #: What the timers run on: Twisted's reactor (None), or a ``task.Clock`` in tests.
    reactor: Any = None
    # The parts (built in open(); these defaults serve a subclass's own open()).
    _counts = PerInstance[SchedulerStats](lambda self: SchedulerStats(self.stats))
    _calls = PerInstance[RedisCalls](lambda self: self._new_calls())
    _local = PerInstance[LocalQueue](lambda _: LocalQueue())
    _seen = PerInstance[SeenCache](
        lambda self: SeenCache(self.seen_cache_size, server_identity(self.server))
    )
    _news = PerInstance[NewsChannel](lambda self: NewsChannel(self.server, "", self.spider))
    _buffer = PerInstance[EnqueueBuffer](lambda self: self._new_buffer(in_script=False))
    _feed = PerInstance[RequestFeed](lambda self: self._new_plain_feed())
    _idle = PerInstance[IdleWatch](lambda self: self._new_idle_watch())
    _membership: Membership | None = None
    _df_from_spider = True  # a subclass's open() builds it with from_spider()
    # True while open() runs, and after an open() that raised: close() then keeps every
    # shared key, whatever SCHEDULER_PERSIST says.
    _opening = False

    def __init__(
        self,
        server: Any,
        persist: bool = False,
        flush_on_start: bool = False,
        queue_key: str = defaults.SCHEDULER_QUEUE_KEY,
        queue_cls: Any = defaults.SCHEDULER_QUEUE_CLASS,
        dupefilter: Any = None,
        dupefilter_key: str = defaults.SCHEDULER_DUPEFILTER_KEY,
        dupefilter_cls: Any = defaults.SCHEDULER_DUPEFILTER_CLASS,
        idle_before_close: float = 0,
        serializer: Any = None,
        *,
        worker_timeout: float = defaults.SCHEDULER_WORKER_TIMEOUT,
        max_deliveries: int = defaults.SCHEDULER_MAX_DELIVERIES,
        enqueue_delay: float = defaults.SCHEDULER_ENQUEUE_DELAY,
        enqueue_batch_size: int = defaults.SCHEDULER_ENQUEUE_BATCH_SIZE,
        prefetch: int = defaults.SCHEDULER_PREFETCH,
        seen_cache_size: int = defaults.SCHEDULER_SEEN_CACHE_SIZE,
        crawler: Crawler | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_scheduler_args(
            idle_before_close=idle_before_close,
            worker_timeout=worker_timeout,
            max_deliveries=max_deliveries,
            enqueue_delay=enqueue_delay,
            enqueue_batch_size=enqueue_batch_size,
            prefetch=prefetch,
        )
        self.server = server
        self.persist = persist
        self.flush_on_start = flush_on_start
        self.queue_key = queue_key
        self.queue_cls = queue_cls
        self.df = dupefilter
        self.dupefilter_key = dupefilter_key
        self.dupefilter_cls = dupefilter_cls
        self.idle_before_close = idle_before_close
        self.serializer = resolve_serializer(
            defaults.SCHEDULER_SERIALIZER if serializer is None else serializer
        )
        self.worker_timeout = worker_timeout
        self.max_deliveries = max_deliveries
        self.enqueue_delay = enqueue_delay
        self.enqueue_batch_size = enqueue_batch_size
        self.prefetch = prefetch
        self.seen_cache_size = seen_cache_size
        self.clock = clock
        self.crawler = crawler
        self.stats = crawler.stats if crawler is not None else None
        self.worker_id = new_worker_id()
        self._df_from_spider = dupefilter is None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        kwargs = scheduler_kwargs(crawler.settings)
        dupefilter_cls = load_configured("DUPEFILTER_CLASS", kwargs["dupefilter_cls"])
        if not hasattr(dupefilter_cls, "from_spider"):
            kwargs["dupefilter"] = build_from_crawler(dupefilter_cls, crawler)
        server = connection.from_settings(crawler.settings)
        connection.ensure_reachable(server)
        return cls(server, crawler=crawler, **kwargs)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        """Deprecated: use :meth:`from_crawler` (Scrapy no longer calls from_settings)."""
        warn_from_settings("Scheduler")
        kwargs = scheduler_kwargs(settings)
        dupefilter_cls = load_configured("DUPEFILTER_CLASS", kwargs["dupefilter_cls"])
        if not hasattr(dupefilter_cls, "from_spider"):
            kwargs["dupefilter"] = dupefilter_cls()
        server = connection.from_settings(settings)
        connection.ensure_reachable(server)
        return cls(server, **kwargs)

    # -- lifecycle -------------------------------------------------------------------

    def open(self, spider: Spider) -> Deferred[None] | None:
        self._opening = True
        self.spider = spider
        self.queue = self._build_queue(spider)
        if self.df is None:
            self.df = load_configured("DUPEFILTER_CLASS", self.dupefilter_cls).from_spider(spider)
        self._build_parts(spider)
        check_key_types(self.server, self._key_uses())
        if isinstance(self.queue, Base):
            settings = self.crawler.settings if self.crawler is not None else None
            self.queue.writes = WriteIds(writes_ttl(settings), writer=self.worker_id)
        assert self._membership is not None
        self._membership.join(self._shared_keys() if self.flush_on_start else ())
        self._feed.recover()
        if pending := len(self.queue):  # the original's spider.log(): spider's logger, DEBUG
            spider_logger = getattr(spider, "logger", logger)
            spider_logger.debug("Resuming crawl (%(count)d requests scheduled)", {"count": pending})
        self._opening = False
        return self.df.open() if not self._df_from_spider and hasattr(self.df, "open") else None

    def close(self, reason: str) -> Deferred[None] | None:
        """The close order: stop the timers; push what is buffered; release the leases of
        the done requests and give back the others; leave the registry, the last worker
        deleting the shared data unless it is kept; close the filter."""
        self._counts.flush_dequeued()
        self.stop_timers()
        # A worker that could not read the queue, or whose open() failed, keeps the data.
        keep = self.persist or self._calls.halted or self._opening
        try:
            self._buffer.send_at_close()
            self._feed.give_back_all()
            if isinstance(self.queue, Base):
                self.queue.writes.forget(self.server)
            self._leave(keep)
        except OUTAGE_ERRORS as exc:
            self._closed_during_outage(exc)
        if not self._df_from_spider and hasattr(self.df, "close"):
            return self.df.close(reason)  # type: ignore[no-any-return]
        return None

    def stop_timers(self) -> None:
        """Stop the heartbeat, the idle watch and the send timer (nothing runs on its own
        any more: what is buffered waits for send_enqueued() or close())."""
        if self._membership is not None:
            self._membership.stop()
        self._idle.stop()
        self._buffer.cancel_timer()

    def flush(self) -> None:
        """Delete the shared queue, its leases and the fingerprints now, whoever else
        uses them. What workers had leased is gone too: it never comes back."""
        self._seen.clear()
        if hasattr(self.df, "clear"):
            self.df.clear()
        self._feed.clear()

    # -- the engine's interface --------------------------------------------------------

    def enqueue_request(self, request: Request) -> bool:
        """Accept ``request``; it reaches Redis within SCHEDULER_ENQUEUE_DELAY.

        Buffered requests are checked against the dupefilter when they are sent:
        a duplicate is then logged, counted (``dupefilter/filtered``) and reported
        with Scrapy's ``request_dropped`` signal, and this returns True. With
        SCHEDULER_ENQUEUE_DELAY = 0 each request is sent at once and this returns
        False for a duplicate, as Scrapy's own scheduler does.
        """
        return self._buffer.add(request)

    def next_request(self) -> Request | None:
        if self._local:  # requests the serializer refused come first
            self._counts.dequeued_from_memory()
            return self._local.pop()
        request = self._feed.next()
        if request is not None:
            self._idle.found_work()
        elif not self._feed.holding():  # (else: held back by pacing)
            self._counts.flush_dequeued()
            self._idle.found_empty()
        return request

    def has_pending_requests(self) -> bool:
        if self._calls.halted:
            return False
        return self.shared_work_pending() or self._idle.waiting_before_close()

    def __len__(self) -> int:
        """Requests in the queue and in this worker; buffered ones are sent first (so
        that duplicates are not counted)."""
        self.send_enqueued()
        return len(self.queue) + len(self._local) + self._feed.holding() + len(self._buffer)

    # -- what the spiders and the stats collector ask (scheduler_api.SharedScheduler) ---

    def send_enqueued(self) -> bool:
        """Send the requests waiting in this worker now; whether none is left waiting."""
        return self._buffer.send()

    def has_unsent_requests(self) -> bool:
        """Whether requests accepted during a Redis outage still wait to be pushed."""
        return bool(len(self._buffer))

    def shared_work_pending(self) -> bool:
        """Whether work may still come from the shared queue.

        True while it holds requests, this worker holds requests in memory, or
        another worker holds leased requests (they produce requests, or come back
        to the queue if that worker dies).
        """
        if self._calls.halted:
            return False
        if len(self._local) or len(self._buffer) or self._feed.holding():
            return True
        return self._calls.call(self._feed.work_elsewhere, True)

    # -- the parts ---------------------------------------------------------------------

    def _build_queue(self, spider: Spider) -> Any:
        queue_cls = load_configured("SCHEDULER_QUEUE_CLASS", self.queue_cls)
        try:
            return queue_cls(
                server=self.server,
                spider=spider,
                key=format_key(self.queue_key, spider.name),
                serializer=self.serializer,
            )
        except TypeError as exc:
            raise ValueError(
                f"Failed to instantiate SCHEDULER_QUEUE_CLASS {self.queue_cls!r}: {exc}"
            ) from exc

    def _build_parts(self, spider: Spider) -> None:
        self._counts = SchedulerStats(self.stats)
        self._calls = self._new_calls()
        self._news = NewsChannel(self.server, news_channel(self.queue.key), spider)
        self._buffer = self._new_buffer(in_script=dedups_in_script(self.df, self.queue))
        if isinstance(self.queue, Base) and self.queue.uses_leases:
            self._feed = self._new_leased_feed()
        else:
            self._feed = self._new_plain_feed()
        registry = WorkerRegistry(
            self.server, workers_key(self.queue.key), self.worker_id, self.worker_timeout
        )
        self._membership = Membership(
            registry, self._beat, self.worker_timeout, self.reactor, spider
        )
        self._idle = self._new_idle_watch()
        wake = lambda: wake_engine(self.crawler)  # noqa: E731
        self._idle.attach(self._feed, self._calls, wake, self._news, self.reactor)

    def _new_calls(self) -> RedisCalls:
        guard = outage_guard(self.crawler) if self.crawler is not None else OutageGuard(300)
        guard.on_recovery(self._seen.clear)  # Redis may have lost data meanwhile
        return RedisCalls(self.server, guard, self.crawler, self.spider, self._key_uses)

    def _new_buffer(self, in_script: bool) -> EnqueueBuffer:
        parts = BufferParts(
            self.queue,
            self.df,
            in_script,
            self._seen,
            self._calls,
            self._counts,
            self._local,
            self._news,
            self.crawler,
            self.spider,
            self.reactor,
        )
        return EnqueueBuffer(parts, self.enqueue_delay, self.enqueue_batch_size)

    def _new_plain_feed(self) -> PlainFeed:
        return PlainFeed(self.queue, self._calls, self._counts, self._buffer.send_now, self.spider)

    def _new_leased_feed(self) -> LeasedFeed:
        book = LeaseBook(
            self.server, self.queue.key, self.worker_id, self.worker_timeout, self.max_deliveries
        )
        pacing = DownloaderPacing(
            Pacer(self.prefetch, self.clock), self.crawler, self.spider, self.reactor
        )
        parts = FeedParts(
            self.queue,
            book,
            self._calls,
            self._counts,
            pacing,
            self._news,
            self._buffer.send_now,
            self.crawler,
            self.spider,
        )
        return LeasedFeed(parts)

    def _new_idle_watch(self) -> IdleWatch:
        return IdleWatch(self.idle_before_close, self.clock)

    def _shared_keys(self) -> list[str]:
        keys = self._feed.flush_keys()
        key = getattr(self.df, "key", None)
        return [*keys, key] if isinstance(key, str) else keys

    def _key_uses(self) -> list[KeyUse]:
        """The keys this worker uses, with their types (see keytypes.py)."""
        uses = [KeyUse(key, kind, "SCHEDULER_QUEUE_KEY") for key, kind in self._feed.key_types()]
        if self._buffer.parts.in_script:  # our filter's set (a subclass may keep another type)
            uses.append(KeyUse(self.df.key, "set", "SCHEDULER_DUPEFILTER_KEY"))
        return uses

    def _leave(self, keep: bool) -> None:
        if self._membership is not None:
            flushed = self._membership.leave(None if keep else self._shared_keys())
            self.cleared_shared_data = flushed
        elif not keep and self.queue is not None:  # open() replaced by a subclass
            self.flush()
            self.cleared_shared_data = True

    def _closed_during_outage(self, exc: BaseException) -> None:
        self._calls.guard.failed(exc)
        logger.error(
            "Redis is unreachable while closing (%(error)s): %(unsent)d requests accepted "
            "during the outage are lost; the %(leased)d requests this worker leased go back "
            "to the queue when their lease expires (SCHEDULER_WORKER_TIMEOUT).",
            {"error": exc, "unsent": len(self._buffer), "leased": self._feed.in_hand()},
            extra={"spider": self.spider},
        )

    def _beat(self) -> None:
        """Every third of SCHEDULER_WORKER_TIMEOUT: renew, push, acknowledge, recover."""
        self._counts.flush_dequeued()
        try:
            self._calls.call(self._beat_once, None)
        except Exception:  # a missed heartbeat must not kill the loop
            logger.warning("Worker heartbeat failed", exc_info=True, extra={"spider": self.spider})

    def _beat_once(self) -> None:
        assert self._membership is not None
        self._membership.registry.beat()
        self._buffer.send_now()
        self._feed.maintain()
