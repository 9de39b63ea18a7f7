"""The Redis scheduler: one request queue and one duplicate filter shared by many workers.

The :class:`Scheduler` is what Scrapy's engine talks to; the work is done by its
parts, built in :meth:`Scheduler.open`:

* an :class:`~scrapy_redis.scheduling.enqueue.EnqueueBuffer`: requests accepted and not in
  Redis yet, sent in batches within SCHEDULER_ENQUEUE_DELAY (dedup and push in
  one script call per batch);
* a request feed (:mod:`scrapy_redis.scheduling.feeds`): leased batches of our queues
  (:class:`~scrapy_redis.scheduling.leased_feed.LeasedFeed`), or a queue class's own
  ``pop()`` (:class:`~scrapy_redis.scheduling.feeds.PlainFeed`);
* an :class:`~scrapy_redis.scheduling.idle.IdleWatch`: the SCHEDULER_IDLE_BEFORE_CLOSE grace
  period, and waking the engine when another worker has news;
* :class:`~scrapy_redis.store.guarded.RedisCalls`: every Redis call through the outage
  guard, and the stop of the crawl when it cannot go on;
* a :class:`~scrapy_redis.scheduling.workers.Membership`: the worker registry and heartbeat.

Every Redis call it makes on the reactor thread is a single round trip; it never
blocks waiting for requests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy import Spider
from scrapy.utils.misc import build_from_crawler

from scrapy_redis import connection, defaults
from scrapy_redis.core.compat import Derived, PerInstance
from scrapy_redis.exceptions import warn_from_settings
from scrapy_redis.politeness.setup import fleet_queue
from scrapy_redis.queue import Base
from scrapy_redis.scheduling.lane_split import check_lane_count, split_into_lanes
from scrapy_redis.scheduling.lanes import LanedQueue
from scrapy_redis.scheduling.parts import (
    Parts,
    assemble,
    assemble_plain,
    dedups_in_script,
    forget_filter_writes,
    log_cleared,
)
from scrapy_redis.scheduling.reports import log_resuming, log_sharing, shared_counts
from scrapy_redis.scheduling.settings import check_scheduler_args, scheduler_kwargs
from scrapy_redis.scheduling.workers import crawler_worker_id, new_worker_id
from scrapy_redis.serializers import resolve_serializer
from scrapy_redis.store.keys import format_key
from scrapy_redis.store.keytypes import check_key_types
from scrapy_redis.store.outage import OUTAGE_ERRORS
from scrapy_redis.store.permissions import check_access
from scrapy_redis.store.writes import WriteIds, writes_ttl
from scrapy_redis.utils import load_configured

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from twisted.internet.defer import Deferred
    from typing_extensions import Self

logger = logging.getLogger(__name__)


__all__ = ["Scheduler", "dedups_in_script"]


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
    #: SCHEDULER_SHARDS (None: by the server, see lane_split.lane_count()).
    shards: int | None = defaults.SCHEDULER_SHARDS
    crawler = Derived["Crawler | None"](lambda self: getattr(self.spider, "crawler", None))
    #: After close: whether this worker, the last one, deleted the shared data.
    cleared_shared_data: bool | None = None
    #: The crawler's worker id (workers.crawler_worker_id), shared with the stats collector.
    worker_id = PerInstance(lambda self: _worker_id(self.crawler))
    #: The clock of pacing and of the grace period (seconds).
    clock: Callable[[], float] = staticmethod(time.monotonic)
    #: What the timers run on: Twisted's reactor (None), or a ``task.Clock`` in tests.
    reactor: Any = None
    # The parts (built in open(); this default serves a subclass's own open()).
    _parts = PerInstance[Parts](assemble_plain)
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
        shards: int | None = defaults.SCHEDULER_SHARDS,
        crawler: Crawler | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server = server
        self.persist = persist
        self.flush_on_start = flush_on_start
        self.queue_key, self.queue_cls = queue_key, queue_cls
        self.df = dupefilter
        self.dupefilter_key, self.dupefilter_cls = dupefilter_key, dupefilter_cls
        self.idle_before_close = idle_before_close
        self.serializer = resolve_serializer(
            defaults.SCHEDULER_SERIALIZER if serializer is None else serializer
        )
        self.worker_timeout, self.max_deliveries = worker_timeout, max_deliveries
        self.enqueue_delay, self.enqueue_batch_size = enqueue_delay, enqueue_batch_size
        self.prefetch, self.seen_cache_size, self.shards = prefetch, seen_cache_size, shards
        check_scheduler_args(self)
        self._attach(crawler, clock)
        self._df_from_spider = dupefilter is None

    def _attach(self, crawler: Crawler | None, clock: Callable[[], float]) -> None:
        """Keep the crawler (None: built without one), its stats and worker id, and the
        clock of pacing and of the grace period."""
        self.clock = clock
        self.crawler = crawler
        self.stats = crawler.stats if crawler is not None else None
        self.worker_id = _worker_id(crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls._from(
            crawler.settings, lambda df_cls: build_from_crawler(df_cls, crawler), crawler
        )

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        """Deprecated: use :meth:`from_crawler` (Scrapy no longer calls from_settings)."""
        warn_from_settings("Scheduler")
        return cls._from(settings, lambda df_cls: df_cls())

    @classmethod
    def _from(
        cls, settings: BaseSettings, build_df: Callable[[Any], Any], crawler: Crawler | None = None
    ) -> Self:
        kwargs = scheduler_kwargs(settings)
        dupefilter_cls = load_configured("DUPEFILTER_CLASS", kwargs["dupefilter_cls"])
        if not hasattr(dupefilter_cls, "from_spider"):
            kwargs["dupefilter"] = build_df(dupefilter_cls)
        server = connection.from_settings(settings)
        connection.ensure_reachable(server)
        check_access(server, _keys_to_check(kwargs, crawler), "scheduler", crawler)
        return cls(server, crawler=crawler, **kwargs)

    # -- lifecycle -------------------------------------------------------------------

    def open(self, spider: Spider) -> Deferred[None] | None:
        self._opening = True
        self.spider = spider
        self.queue = fleet_queue(self, spider, self._build_queue(spider))  # politeness/
        if self.df is None:
            self.df = load_configured("DUPEFILTER_CLASS", self.dupefilter_cls).from_spider(spider)
        self.queue = split_into_lanes(self, spider, self.queue)
        self._parts = parts = assemble(self)
        check_key_types(self.server, parts.key_uses())
        ours = isinstance(self.queue, (Base, LanedQueue))
        if ours:
            settings = self.crawler.settings if self.crawler is not None else None
            self.queue.writes = WriteIds(writes_ttl(settings), writer=self.worker_id)
            # before joining: a worker refused leaves no registry entry
            check_lane_count(self.server, self.queue, self.df)
        assert parts.membership is not None
        flush_keys = parts.shared_keys() if self.flush_on_start else ()
        parts.membership.join(flush_keys, after_flush=self._clear_filter)
        if ours:
            check_lane_count(self.server, self.queue, self.df, record=True)
        parts.feed.recover()
        log_sharing(self.queue, self.server, spider)
        if pending := len(self.queue):
            log_resuming(spider, pending)
        self._opening = False
        return self.df.open() if not self._df_from_spider and hasattr(self.df, "open") else None

    def close(self, reason: str) -> Deferred[None] | None:
        """The close order: stop the timers; push what is buffered; release the leases of
        the done requests and give back the others; leave the registry, the last worker
        deleting the shared data unless it is kept; close the filter."""
        parts = self._parts
        parts.counts.flush_dequeued()
        self.stop_timers()
        # A worker that could not read the queue, or whose open() failed, keeps the data.
        keep = self.persist or parts.calls.halted or self._opening
        try:
            parts.buffer.send_at_close()
            parts.feed.give_back_all()
            if isinstance(self.queue, (Base, LanedQueue)):
                self.queue.writes.forget(self.server)
            if self._df_from_spider:  # nobody closes these filters (close() forgets)
                forget_filter_writes([self.df, *getattr(self.queue, "filters", ())], self.server)
            self._leave(keep)
        except OUTAGE_ERRORS as exc:
            parts.closed_during_outage(exc)
        if isinstance(self.queue, LanedQueue):
            self.queue.close()  # its sending threads
        if not self._df_from_spider and hasattr(self.df, "close"):
            return self.df.close(reason)  # type: ignore[no-any-return]
        return None

    def stop_timers(self) -> None:
        """Stop the heartbeat, the idle watch and the send timer (nothing runs on its own
        any more: what is buffered waits for send_enqueued() or close())."""
        parts = self._parts
        if parts.membership is not None:
            parts.membership.stop()
        parts.idle.stop()
        parts.buffer.cancel_timer()
        parts.stop_due()

    def flush(self) -> None:
        """Delete the shared queue, its leases and the fingerprints now, whoever else
        uses them. What workers had leased is gone too: it never comes back."""
        self._parts.seen.clear()
        self._clear_filter()
        self._parts.feed.clear()
        self._parts.clear_due()

    # -- the engine's interface --------------------------------------------------------

    def enqueue_request(self, request: Request) -> bool:
        """Accept ``request``; it reaches Redis within SCHEDULER_ENQUEUE_DELAY.

        Buffered requests are checked against the dupefilter when they are sent:
        a duplicate is then logged, counted (``dupefilter/filtered``) and reported
        with Scrapy's ``request_dropped`` signal, and this returns True. With
        SCHEDULER_ENQUEUE_DELAY = 0 each request is sent at once and this returns
        False for a duplicate, as Scrapy's own scheduler does.
        """
        return self._parts.buffer.add(request)

    def next_request(self) -> Request | None:
        parts = self._parts
        if parts.local:  # requests the serializer refused come first
            parts.counts.dequeued_from_memory()
            return parts.local.pop()
        request = parts.next_shared()  # (requests due later made ready when due)
        if request is not None:
            if parts.idle.empty_since is not None:  # it was idle
                parts.idle.found_work()
        elif not parts.feed.holding():  # (else: held back by pacing)
            parts.counts.flush_dequeued()
            parts.idle.found_empty()
        return request

    def has_pending_requests(self) -> bool:
        if self._parts.calls.halted:
            return False
        return self.shared_work_pending() or self._parts.idle.waiting_before_close()

    def __len__(self) -> int:
        """Requests in the queue and in this worker; buffered ones are sent first (so
        that duplicates are not counted)."""
        self.send_enqueued()
        parts = self._parts
        return len(self.queue) + len(parts.local) + parts.feed.holding() + len(parts.buffer)

    def has_unsent_requests(self) -> bool:
        """Whether requests accepted during a Redis outage still wait to be pushed."""
        return bool(len(self._parts.buffer))

    # -- what the spiders and the stats collector ask (scheduler_api.SharedScheduler) ---

    def send_enqueued(self) -> bool:
        """Send the requests waiting in this worker now; whether none is left waiting."""
        return self._parts.buffer.send()

    def shared_work_pending(self) -> bool:
        """Whether work may still come from the shared queue.

        True while it holds requests, this worker holds requests in memory, a
        request is due within MAX_IDLE_TIME_BEFORE_CLOSE (scheduling/due.py), or
        another worker holds leased requests (they produce requests, or come back
        to the queue if that worker dies).
        """
        parts = self._parts
        if parts.calls.halted:
            return False
        if len(parts.local) or len(parts.buffer) or parts.feed.holding():
            return True
        return parts.calls.call(parts.feed.work_elsewhere, True) or parts.due_soon()

    # -- helpers ------------------------------------------------------------------------

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

    def _clear_filter(self) -> None:
        """After the shared keys were deleted: the filter's other keys too (a filter
        keeping fingerprints in many keys, such as the lean filter's buckets), and
        the lanes' filters."""
        for dupefilter in [self.df, *getattr(self.queue, "filters", ())]:
            if hasattr(dupefilter, "clear"):
                dupefilter.clear()

    def _leave(self, keep: bool) -> None:
        membership = self._parts.membership
        if membership is not None:
            if membership.joined:  # (not if open() failed before it joined)
                keys = None if keep else self._parts.shared_keys()
                counts = None if keep else shared_counts(self.queue, self.df)
                flushed = membership.leave(keys, after_flush=self._clear_filter)
                self.cleared_shared_data = flushed
                if flushed and counts is not None:
                    log_cleared(counts, self.spider)
        elif not keep and self.queue is not None:  # open() replaced by a subclass
            self.flush()
            self.cleared_shared_data = True


def _keys_to_check(kwargs: dict[str, Any], crawler: Crawler | None) -> list[tuple[str, str]]:
    """The queue's and the filter's keys, checked for access before the engine opens."""
    spider = getattr(crawler, "spider", None)
    if spider is None:
        return []
    return [
        (format_key(kwargs["queue_key"], spider.name), "SCHEDULER_QUEUE_KEY"),
        (format_key(kwargs["dupefilter_key"], spider.name), "SCHEDULER_DUPEFILTER_KEY"),
    ]


def _worker_id(crawler: Crawler | None) -> str:
    """The id a scheduler registers: its crawler's (also the stats collector's), or a new
    one for a scheduler built without a crawler (the deprecated from_settings())."""
    return new_worker_id() if crawler is None else crawler_worker_id(crawler)
