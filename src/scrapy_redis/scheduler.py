"""The Redis scheduler: one request queue and one duplicate filter shared by many workers.

Every Redis call it makes on the reactor thread is a single round trip; it
never blocks waiting for requests (SCHEDULER_IDLE_BEFORE_CLOSE is a grace
period during which the worker keeps polling, not a blocking pop).

Round trips are batched: enqueued requests wait in the worker for at most
SCHEDULER_ENQUEUE_DELAY, then one script call records their fingerprints and
pushes the new ones; one pop script call leases up to SCHEDULER_PREFETCH
requests and releases the leases of the requests the engine is done with.
"""

from __future__ import annotations

import gc
import heapq
import logging
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import count, islice
from typing import TYPE_CHECKING, Any, TypeVar

from redis.exceptions import ResponseError
from scrapy import signals
from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.utils.misc import build_from_crawler
from twisted.internet import task

from scrapy_redis import connection, defaults
from scrapy_redis._compat import Derived, PerInstance
from scrapy_redis._engine import (
    EVERY_LIVE_REQUEST,
    downloader_slot,
    engine_downloader,
    engine_in_progress,
    engine_of,
    installed_reactor,
    wake_engine,
)
from scrapy_redis.connection import ServerIdentity, server_identity
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.exceptions import (
    UndecodableRequestError,
    UnserializableRequestError,
    warn_from_settings,
)
from scrapy_redis.keys import format_key, invalid_entries_key, news_channel, workers_key
from scrapy_redis.keytypes import KeyUse, check_key_types, describe, is_wrong_type, wrong_types
from scrapy_redis.leases import Lease, LeaseBook
from scrapy_redis.logsafe import shorten
from scrapy_redis.outage import OUTAGE_ERRORS, OutageGuard, outage_guard
from scrapy_redis.pacing import Pacer, slots_may_have_delays
from scrapy_redis.queue import Base, Candidate, Entry
from scrapy_redis.serializers import resolve_serializer
from scrapy_redis.utils import load_configured
from scrapy_redis.wakeup import NewsListener, QueueWatcher
from scrapy_redis.workers import WorkerRegistry, new_worker_id
from scrapy_redis.writes import WriteIds, writes_ttl

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from twisted.internet.base import DelayedCall
    from twisted.internet.defer import Deferred
    from typing_extensions import Self

logger = logging.getLogger(__name__)

T = TypeVar("T")

# How often an undecodable entry may be skipped in one next_request() call.
_MAX_SKIPS = 100
# How many held-back prefetched requests one hand-out looks past (see pacing.py).
_MAX_HELD = 32


@dataclass(slots=True)
class _Unsent:
    """A request accepted by enqueue_request() and not pushed yet."""

    request: Request
    #: Script path: its fingerprint, computed when enqueued (None: dont_filter).
    fingerprint: str | None = None
    #: request_seen() path: whether request_seen() has recorded it already.
    seen_checked: bool = False


class _SeenCache:
    """Fingerprints this worker knows are in the shared set (bounded, oldest out).

    The set only grows while the server keeps its data, so a fingerprint found
    there once is a duplicate: repeated links are dropped without a round trip.
    A server that restarted, was restored from an older dump or failed over to
    a replica that was behind may have lost fingerprints (and the requests that
    went with them, which come back to be crawled again): the cache is dropped
    whenever the server's identity changes (see ServerIdentity) and when an
    outage ends, so that their links are checked with Redis again.
    """

    def __init__(self, size: int, identity: ServerIdentity | None = None) -> None:
        self.size = size
        self._identity = identity if identity is not None else ServerIdentity()
        self._epoch = self._identity.changes
        self._fingerprints: dict[str, None] = {}

    def __contains__(self, fingerprint: str) -> bool:
        if self._identity.changes != self._epoch:
            self.clear()
        return fingerprint in self._fingerprints

    def epoch(self) -> int:
        """Take before a call that records fingerprints; give it to :meth:`add`."""
        return self._identity.changes

    def add(self, fingerprints: Iterable[str], epoch: int) -> None:
        """Remember ``fingerprints``, recorded by a call that started at ``epoch``
        (nothing if the server changed since: what it recorded may be lost)."""
        if self._identity.changes != self._epoch:
            self.clear()
        if self.size <= 0 or epoch != self._epoch:
            return
        known = self._fingerprints
        for fingerprint in fingerprints:
            known[fingerprint] = None
        while len(known) > self.size:
            del known[next(iter(known))]

    def clear(self) -> None:
        self._fingerprints.clear()
        self._epoch = self._identity.changes


class _LocalQueue:
    """Requests kept in this worker's memory: those the serializer refused."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Request]] = []
        self._order = count()

    def push(self, request: Request) -> None:
        heapq.heappush(self._heap, (-request.priority, next(self._order), request))

    def pop(self) -> Request | None:
        return heapq.heappop(self._heap)[2] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)


class _HandedOut(weakref.ref):  # type: ignore[type-arg]
    """A request handed to the engine and not done yet, with its leased entry.

    A weak reference: like Scrapy's own scheduler, this one keeps no request alive.
    A freed request is done, since the engine holds those it is working on. One
    object per request (fewer for Python's garbage collector than the request's
    own), hashed by identity: requests that reuse the memory of freed ones are
    other entries.
    """

    __slots__ = ("lease", "position")
    __hash__ = object.__hash__
    __eq__ = object.__eq__

    lease: Lease
    position: int

    @classmethod
    def of(cls, request: Request, lease: Lease, position: int) -> Self:
        # Attributes set here rather than in __init__: a third of the cost to build.
        handed = cls(request)
        handed.lease = lease
        handed.position = position
        return handed


def _by_lease(entries: Iterable[tuple[Lease, int]]) -> list[tuple[Lease, list[int]]]:
    """Leased entries (lease, position), grouped: each lease with its positions."""
    positions: dict[Lease, list[int]] = {}
    for lease, position in entries:
        positions.setdefault(lease, []).append(position)
    return list(positions.items())


def _scheduler_kwargs(settings: BaseSettings) -> dict[str, Any]:
    """The Scheduler's constructor arguments, read from ``settings``."""
    return {
        "persist": settings.getbool("SCHEDULER_PERSIST", defaults.SCHEDULER_PERSIST),
        "flush_on_start": settings.getbool(
            "SCHEDULER_FLUSH_ON_START", defaults.SCHEDULER_FLUSH_ON_START
        ),
        "idle_before_close": settings.getfloat(
            "SCHEDULER_IDLE_BEFORE_CLOSE", defaults.SCHEDULER_IDLE_BEFORE_CLOSE
        ),
        "queue_key": settings.get("SCHEDULER_QUEUE_KEY") or defaults.SCHEDULER_QUEUE_KEY,
        "queue_cls": settings.get("SCHEDULER_QUEUE_CLASS") or defaults.SCHEDULER_QUEUE_CLASS,
        "dupefilter_key": settings.get("SCHEDULER_DUPEFILTER_KEY")
        or defaults.SCHEDULER_DUPEFILTER_KEY,
        "dupefilter_cls": _dupefilter_class_path(settings),
        "serializer": settings.get("SCHEDULER_SERIALIZER") or defaults.SCHEDULER_SERIALIZER,
        "worker_timeout": settings.getfloat(
            "SCHEDULER_WORKER_TIMEOUT", defaults.SCHEDULER_WORKER_TIMEOUT
        ),
        "max_deliveries": settings.getint(
            "SCHEDULER_MAX_DELIVERIES", defaults.SCHEDULER_MAX_DELIVERIES
        ),
        "enqueue_delay": settings.getfloat(
            "SCHEDULER_ENQUEUE_DELAY", defaults.SCHEDULER_ENQUEUE_DELAY
        ),
        "enqueue_batch_size": settings.getint(
            "SCHEDULER_ENQUEUE_BATCH_SIZE", defaults.SCHEDULER_ENQUEUE_BATCH_SIZE
        ),
        "prefetch": settings.getint("SCHEDULER_PREFETCH", defaults.SCHEDULER_PREFETCH),
        "seen_cache_size": settings.getint(
            "SCHEDULER_SEEN_CACHE_SIZE", defaults.SCHEDULER_SEEN_CACHE_SIZE
        ),
    }


def _dupefilter_class_path(settings: BaseSettings) -> Any:
    """DUPEFILTER_CLASS if the project set it, else SCHEDULER_DUPEFILTER_CLASS (ours).

    Scrapy's default DUPEFILTER_CLASS filters in one process's memory only, which
    is never what a shared queue wants.
    """
    if (settings.getpriority("DUPEFILTER_CLASS") or 0) > SETTINGS_PRIORITIES["default"]:
        return settings.get("DUPEFILTER_CLASS")
    return settings.get("SCHEDULER_DUPEFILTER_CLASS") or defaults.SCHEDULER_DUPEFILTER_CLASS


def _dedups_in_script(dupefilter: Any, queue: Any) -> bool:
    """Whether fingerprints can be checked and recorded by the queue's push script
    (our filter and queue, unless a subclass opted out: see their declared attributes)."""
    return (
        isinstance(dupefilter, RFPDupeFilter)
        and dupefilter.checks_in_script
        and isinstance(queue, Base)
        and queue.uses_push_script
    )


def _supports_leases(queue: Any) -> bool:
    """Whether ``queue`` is popped through ``pop_entries()`` with leases (see Base.uses_leases)."""
    return isinstance(queue, Base) and queue.uses_leases


class Scheduler:
    """Redis-based scheduler (``SCHEDULER = "scrapy_redis.scheduler.Scheduler"``).

    Settings: SCHEDULER_PERSIST, SCHEDULER_FLUSH_ON_START,
    SCHEDULER_IDLE_BEFORE_CLOSE, SCHEDULER_QUEUE_KEY, SCHEDULER_QUEUE_CLASS,
    SCHEDULER_DUPEFILTER_KEY, DUPEFILTER_CLASS, SCHEDULER_SERIALIZER,
    SCHEDULER_WORKER_TIMEOUT, SCHEDULER_ENQUEUE_DELAY, SCHEDULER_ENQUEUE_BATCH_SIZE,
    SCHEDULER_PREFETCH, SCHEDULER_SEEN_CACHE_SIZE.

    Every attribute has a class-level default, for subclasses written for the
    original whose ``__init__`` (and ``open()``) set only the original's.
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
    crawler = Derived["Crawler | None"](lambda self: getattr(self.spider, "crawler", None))
    cleared_shared_data: bool | None = None
    worker_id = PerInstance(lambda _: new_worker_id())
    _pacer = PerInstance(lambda self: Pacer(self.prefetch))
    _pace_call: DelayedCall | None = None
    _downloader: Any = None
    _may_delay: bool | None = None
    _df_from_spider = True  # a subclass's open() builds it with from_spider()
    _local = PerInstance(lambda _: _LocalQueue())
    _registry: WorkerRegistry | None = None
    _heartbeat: task.LoopingCall | None = None
    _watcher = PerInstance(lambda _: QueueWatcher(lambda: False, lambda: None))
    _news = ""
    _listener: NewsListener | None = None
    _others_leased = False
    _guard = PerInstance[OutageGuard](lambda self: self._new_guard())
    _unsent = PerInstance(lambda _: deque[_Unsent]())
    _seen = PerInstance(
        lambda self: _SeenCache(defaults.SCHEDULER_SEEN_CACHE_SIZE, server_identity(self.server))
    )
    _send_call: DelayedCall | None = None
    _in_script = False
    _book: LeaseBook | None = None
    _prefetched = PerInstance(lambda _: deque[tuple["Entry | Request", Lease, int]]())
    _leased = PerInstance(lambda _: set[_HandedOut]())
    _invalid = PerInstance(lambda _: list[tuple[Entry, Lease, int, str]]())
    _uncounted = 0
    _empty_since: float | None = None
    _unserializable_logged = False
    _halted = False
    _opening = False
    _failed_push: tuple[int, int] | None = None

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
        if idle_before_close < 0:
            raise ValueError(
                f"SCHEDULER_IDLE_BEFORE_CLOSE = {idle_before_close!r} cannot be negative; "
                "use 0 to stop waiting for new requests as soon as the queue is empty."
            )
        if worker_timeout <= 0:
            raise ValueError(f"SCHEDULER_WORKER_TIMEOUT = {worker_timeout!r} must be positive.")
        if max_deliveries < 0:
            raise ValueError(
                f"SCHEDULER_MAX_DELIVERIES = {max_deliveries!r} cannot be negative; use 0 to "
                "put a dead worker's requests back in the queue however often it happens."
            )
        if enqueue_delay < 0:
            raise ValueError(
                f"SCHEDULER_ENQUEUE_DELAY = {enqueue_delay!r} cannot be negative; use 0 to "
                "push every request to Redis as soon as it is enqueued."
            )
        if enqueue_batch_size < 1 or prefetch < 1:
            raise ValueError(
                f"SCHEDULER_ENQUEUE_BATCH_SIZE = {enqueue_batch_size!r} and SCHEDULER_PREFETCH = "
                f"{prefetch!r} must be at least 1."
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
        self._pacer = Pacer(prefetch, clock)  # how many requests to lease and hand out
        self._pace_call: DelayedCall | None = None  # wakes the engine after a hold-back
        self._downloader: Any = None  # the engine's, found at a pop (see _engine.py)
        self._may_delay: bool | None = None  # whether the settings may delay a slot
        self.crawler = crawler
        self.stats = crawler.stats if crawler is not None else None
        self.spider: Spider | None = None
        self.queue: Any = None
        self.worker_id = new_worker_id()
        self._df_from_spider = dupefilter is None
        self._local = _LocalQueue()
        self._registry: WorkerRegistry | None = None
        self._heartbeat: task.LoopingCall | None = None
        self._watcher = QueueWatcher(lambda: False, lambda: None)  # replaced in open()
        self._news = ""  # the queue's news channel (set in open())
        self._listener: NewsListener | None = None
        self._others_leased = False
        self._seen = _SeenCache(seen_cache_size, server_identity(server))
        self._guard = self._new_guard()
        # Requests accepted and not pushed yet (buffered, or Redis unreachable).
        self._unsent = deque()
        # The batch whose push failed (an outage): its write number and size, kept to send
        # it again as it was, so that it is applied once (see writes.py).
        self._failed_push = None
        self._send_call: DelayedCall | None = None
        self._in_script = False  # whether the push script checks fingerprints
        self._book: LeaseBook | None = None
        # Leased, not handed out yet: each entry (or the request decoded from it, held
        # back by pacing) with its lease and position in it.
        self._prefetched = deque()
        # Handed to the engine, not done yet (see _HandedOut).
        self._leased = set()
        # Undecodable entries not set aside yet (Redis was unreachable), with the error.
        self._invalid = []
        self._uncounted = 0  # requests handed out from the shared queue, not in stats yet
        self._empty_since: float | None = None
        self._unserializable_logged = False
        self._halted = False
        # True while open() runs, and after an open() that raised: close() then keeps
        # every shared key, whatever SCHEDULER_PERSIST says.
        self._opening = False
        #: After close: whether this worker, the last one, deleted the shared data.
        self.cleared_shared_data: bool | None = None

    def _new_guard(self) -> OutageGuard:
        guard = outage_guard(self.crawler) if self.crawler is not None else OutageGuard(300)
        guard.on_recovery(self._seen.clear)  # Redis may have lost data meanwhile
        return guard

    def __len__(self) -> int:
        self.send_enqueued()
        return len(self.queue) + len(self._local) + len(self._prefetched) + len(self._unsent)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        kwargs = _scheduler_kwargs(crawler.settings)
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
        kwargs = _scheduler_kwargs(settings)
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
        if _supports_leases(self.queue):
            self._book = LeaseBook(
                self.server,
                self.queue.key,
                self.worker_id,
                self.worker_timeout,
                self.max_deliveries,
            )
        self._in_script = _dedups_in_script(self.df, self.queue)
        check_key_types(self.server, self._key_uses())
        if isinstance(self.queue, Base):
            settings = self.crawler.settings if self.crawler is not None else None
            self.queue.writes = WriteIds(writes_ttl(settings), writer=self.worker_id)
        self._join()
        self._recover()
        if pending := len(self.queue):  # the original's spider.log(): spider's logger, DEBUG
            spider_logger = getattr(spider, "logger", logger)
            spider_logger.debug("Resuming crawl (%(count)d requests scheduled)", {"count": pending})
        self._opening = False
        return self.df.open() if not self._df_from_spider and hasattr(self.df, "open") else None

    def close(self, reason: str) -> Deferred[None] | None:
        self._count_dequeued()
        if self._heartbeat is not None and self._heartbeat.running:
            self._heartbeat.stop()
        self._watcher.stop()
        if self._listener is not None:
            self._listener.stop()
        if self._send_call is not None and self._send_call.active():
            self._send_call.cancel()
        # A worker that could not read the queue, or whose open() failed, keeps the data.
        keep = self.persist or self._halted or self._opening
        try:
            self._send_unsent_at_close()
            self._give_back_leases()
            if isinstance(self.queue, Base):
                self.queue.writes.forget(self.server)
            if self._registry is not None:
                self._leave(keep)
            elif not keep and self.queue is not None:  # open() replaced by a subclass
                self.flush()
                self.cleared_shared_data = True
        except OUTAGE_ERRORS as exc:
            self._closed_during_outage(exc)
        if not self._df_from_spider and hasattr(self.df, "close"):
            return self.df.close(reason)  # type: ignore[no-any-return]
        return None

    def _send_unsent_at_close(self) -> None:
        """Push what is still buffered; a key of another type loses it (logged)."""
        try:
            self._send_unsent()
        except ResponseError as exc:
            if not is_wrong_type(exc):
                raise
            logger.error(
                "%(count)d requests could not be pushed to Redis: %(error)s",
                {"count": len(self._unsent), "error": exc},
                extra={"spider": self.spider},
            )
            self._unsent.clear()

    def flush(self) -> None:
        """Delete the shared queue, its leases and the fingerprints now, whoever else
        uses them. What workers had leased is gone too: it never comes back."""
        self._seen.clear()
        if hasattr(self.df, "clear"):
            self.df.clear()
        self.queue.clear()
        if self._book is not None:
            self._book.clear()
            self._prefetched.clear()
            self._invalid.clear()

    def _closed_during_outage(self, exc: BaseException) -> None:
        self._guard.failed(exc)
        logger.error(
            "Redis is unreachable while closing (%(error)s): %(unsent)d requests accepted "
            "during the outage are lost; the %(leased)d requests this worker leased go back "
            "to the queue when their lease expires (SCHEDULER_WORKER_TIMEOUT).",
            {
                "error": exc,
                "unsent": len(self._unsent),
                "leased": len(self._leased) + len(self._prefetched),
            },
            extra={"spider": self.spider},
        )

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

    def _shared_keys(self) -> list[str]:
        keys = list(self.queue.flush_keys()) if hasattr(self.queue, "flush_keys") else []
        if self._book is not None:
            keys += self._book.flush_keys
        key = getattr(self.df, "key", None)
        return [*keys, key] if isinstance(key, str) else keys

    def _key_uses(self) -> list[KeyUse]:
        """The keys this worker uses, with their types (see keytypes.py)."""
        uses = [KeyUse(key, kind, "SCHEDULER_QUEUE_KEY") for key, kind in self._queue_key_types()]
        if self._in_script:  # our filter's set (a subclass may keep another type there)
            uses.append(KeyUse(self.df.key, "set", "SCHEDULER_DUPEFILTER_KEY"))
        return uses

    def _queue_key_types(self) -> list[tuple[str, str]]:
        key = self.queue.key
        types = [(workers_key(key), "hash"), (invalid_entries_key(key), "list")]
        if kind := getattr(self.queue, "redis_type", None):
            types.append((key, kind))
        if self._book is not None:
            book = self._book
            types += [(book.leases_key, "hash"), (book.deadlines_key, "zset")]
            types += [(book.deliveries_key, "hash"), (book.dead_letters_key, "list")]
        return types

    def _join(self) -> None:
        self._registry = WorkerRegistry(
            self.server, workers_key(self.queue.key), self.worker_id, self.worker_timeout
        )
        flush_keys = self._shared_keys() if self.flush_on_start else ()
        census = self._registry.join(flush_keys=flush_keys)
        if self.flush_on_start and not census.flushed:
            logger.warning(
                "SCHEDULER_FLUSH_ON_START is set but %(others)d other worker(s) are using "
                "the queue: not flushing it.",
                {"others": census.others},
                extra={"spider": self.spider},
            )
        self._heartbeat = task.LoopingCall(self._beat)
        self._heartbeat.start(self.worker_timeout / 3, now=False)
        self._watcher = QueueWatcher(
            lambda: self._redis_call(self._has_news, False),
            lambda: wake_engine(self.crawler),
            on_start=lambda: self._redis_call(self._take_baseline, None),
        )
        self._news = news_channel(self.queue.key)
        self._listener = NewsListener(self.server, self._news, self._watcher.notify)

    def _leave(self, keep: bool) -> None:
        assert self._registry is not None
        census = self._registry.leave(() if keep else self._shared_keys())
        self.cleared_shared_data = census.flushed
        if not keep and not census.flushed:
            logger.info(
                "Not clearing the shared queue: %(others)d other worker(s) still use it.",
                {"others": census.others},
                extra={"spider": self.spider},
            )

    # -- the engine's interface --------------------------------------------------------

    def enqueue_request(self, request: Request) -> bool:
        """Accept ``request``; it reaches Redis within SCHEDULER_ENQUEUE_DELAY.

        Buffered requests are checked against the dupefilter when they are sent:
        a duplicate is then logged, counted (``dupefilter/filtered``) and reported
        with Scrapy's ``request_dropped`` signal, and this returns True. With
        SCHEDULER_ENQUEUE_DELAY = 0 each request is sent at once and this returns
        False for a duplicate, as Scrapy's own scheduler does.
        """
        fingerprint = None
        if self._in_script and not request.dont_filter:
            fingerprint = self.df.request_fingerprint(request)
            if fingerprint in self._seen:  # a link this worker has met before
                self.df.log(request, self.spider)
                return False
        self._unsent.append(_Unsent(request, fingerprint))
        if self.enqueue_delay > 0 and len(self._unsent) < self.enqueue_batch_size:
            self._schedule_send()
            return True
        # While Redis is unreachable it is pushed when Redis is back (next request or
        # heartbeat); the engine is told it was accepted.
        return self._redis_call(lambda: self._send_unsent(answer_for=request), True)

    def send_enqueued(self) -> bool:
        """Send the requests waiting in this worker now; whether none is left waiting."""
        if self._unsent:
            self._redis_call(self._send_unsent, False)
        return not self._unsent

    def _schedule_send(self) -> None:
        if self._send_call is None or not self._send_call.active():
            reactor = installed_reactor()
            self._send_call = reactor.callLater(self.enqueue_delay, self.send_enqueued)

    def _send_unsent(self, answer_for: Request | None = None) -> bool:
        """Dedup and push the requests accepted so far, in batches.

        Returns whether ``answer_for`` was new; the others' duplicates are
        reported with the ``request_dropped`` signal (the engine was told True).
        """
        answer = True
        while self._unsent:
            # One script call per batch; otherwise one request at a time, so that a
            # failure half-way never pushes again what was already pushed.
            if self._in_script:
                size = self._failed_push[1] if self._failed_push else self.enqueue_batch_size
                batch = list(islice(self._unsent, size))
                new = self._send_in_script(batch)
            else:
                batch = [self._unsent[0]]
                new = [self._send_checked(batch[0])]
            for unsent, is_new in zip(batch, new, strict=True):
                if is_new:
                    continue
                request = unsent.request
                self.df.log(request, self.spider)
                if request is answer_for:
                    answer = False
                elif self.crawler is not None:
                    self.crawler.signals.send_catch_log(
                        signals.request_dropped, request=request, spider=self.spider
                    )
            for _ in batch:
                self._unsent.popleft()
            self._guard.succeeded()  # only after a call that reached Redis
        return answer

    def _send_in_script(self, batch: list[_Unsent]) -> list[bool]:
        """One script call: record the fingerprints, push the new requests."""
        candidates: list[Candidate] = []
        refused: dict[int, UnserializableRequestError] = {}
        for index, unsent in enumerate(batch):
            entry: Entry | None = None
            try:
                entry = self.queue.encode(unsent.request)
            except UnserializableRequestError as exc:
                refused[index] = exc
            candidates.append(Candidate(unsent.fingerprint, entry))
        epoch = self._seen.epoch()
        if self._failed_push is None:
            self._failed_push = (self.queue.writes.take(), len(batch))
        write = self._failed_push[0]
        new: list[bool] = self.queue.push_new(candidates, self.df.key, self._news, write=write)
        self._failed_push = None
        self._seen.add((unsent.fingerprint for unsent in batch if unsent.fingerprint), epoch)
        pushed = sum(new) - sum(new[index] for index in refused)
        self._inc("scheduler/enqueued/redis", pushed)
        self._inc("scheduler/enqueued", pushed)
        for index, error in refused.items():
            if new[index]:
                self._keep_locally(batch[index].request, error)
        return new

    def _send_checked(self, unsent: _Unsent) -> bool:
        """``request_seen()`` then ``push()``; whether the request was new."""
        request = unsent.request
        if not (unsent.seen_checked or request.dont_filter) and self.df.request_seen(request):
            return False
        unsent.seen_checked = True
        self._push(request)
        return True

    def _push(self, request: Request) -> None:
        try:
            self.queue.push(request)
        except UnserializableRequestError as exc:
            self._keep_locally(request, exc)
            return
        self._inc("scheduler/enqueued/redis")
        self._inc("scheduler/enqueued")

    def next_request(self) -> Request | None:
        if self._prefetched and not self._local:  # the usual case: nothing else to do
            request = self._hand_out()
            if request is not None:
                self._uncounted += 1
                return request
            if self._prefetched:  # held back until the downloader starts more (pacing)
                return None
        request = self._local.pop()
        if request is not None:
            self._inc("scheduler/dequeued/memory")
            self._inc("scheduler/dequeued")
            return request
        request = self._hand_out() if self._prefetched else None
        if request is None:
            request = self._redis_call(self._next_shared, None)
        if request is None:
            if self._prefetched:  # held back (pacing)
                return None
            self._count_dequeued()
            if self._empty_since is None:
                self._empty_since = time.monotonic()
            if self._listener is not None:
                self._listener.start()
            self._watcher.watch()
            return None
        self._empty_since = None
        self._watcher.stop()
        self._uncounted += 1
        return request

    def _count_dequeued(self) -> None:
        """Add the requests handed out from the shared queue to the stats.

        Counted in batches (at each pop, when the queue is found empty, on the
        heartbeat and at close): two stat updates per request cost more than
        the rest of handing it out.
        """
        self._inc("scheduler/dequeued/redis", self._uncounted)
        self._inc("scheduler/dequeued", self._uncounted)
        self._uncounted = 0

    def has_pending_requests(self) -> bool:
        if self._halted:
            return False
        return self.shared_work_pending() or self._waiting_before_close()

    def _next_shared(self) -> Request | None:
        # Before popping and acknowledging: the requests of done requests reach Redis
        # before the leases of their parents are released. Ends an outage too: the
        # other components write what they kept.
        self._send_unsent()
        if self._book is None:
            return self._pop_plain()
        if self._guard.down or self._halted:
            return None
        if self._invalid:
            self._set_aside_invalid()
        for _ in range(_MAX_SKIPS):
            if not self._prefetched and not self._refill():
                return None
            request = self._hand_out()
            if request is not None or self._halted or self._prefetched:
                return request  # None with requests prefetched: held back (pacing)
        return None

    def _take_baseline(self) -> None:
        self._others_leased = self._others_hold_leases()

    def _has_news(self) -> bool:
        """Requests to pop, or the other workers' leases all released (time to idle)."""
        if not self._queue_is_empty():
            return True
        return self._others_leased and not self._others_hold_leases()

    def _others_hold_leases(self) -> bool:
        return self._book is not None and self._book.count_all() > len(self._book.held)

    def has_unsent_requests(self) -> bool:
        """Whether requests accepted during a Redis outage still wait to be pushed."""
        return bool(self._unsent)

    def _redis_call(self, call: Callable[[], T], during_outage: T) -> T:
        """``call()``, or ``during_outage`` while Redis is unreachable (see outage.py) or
        after a key turned out to have another type (the spider is closed)."""
        try:
            result = self._guard.attempt(call, during_outage)
        except ResponseError as exc:
            if not is_wrong_type(exc):
                raise
            self._wrong_type(exc)
            return during_outage
        if self._guard.down:
            self._check_outage()
        return result

    def _check_outage(self) -> None:
        if self._guard.expired() and not self._halted:
            logger.error(
                "Redis has been unreachable for more than REDIS_OUTAGE_TIMEOUT (%(timeout)ss).",
                {"timeout": self._guard.timeout},
                extra={"spider": self.spider},
            )
            self._stop("redis_unavailable")

    def shared_work_pending(self) -> bool:
        """Whether work may still come from the shared queue.

        True while it holds requests, this worker holds requests in memory, or
        another worker holds leased requests (they produce requests, or come back
        to the queue if that worker dies).
        """
        if self._halted:
            return False
        if len(self._local) or self._unsent or self._prefetched:
            return True
        return self._redis_call(self._shared_pending, True)

    def _shared_pending(self) -> bool:
        if not self._queue_is_empty():
            return True
        if self._book is None:
            return False
        self._ack_done()
        return self._others_hold_leases()

    # -- leases -------------------------------------------------------------------------

    def _refill(self) -> bool:
        """Lease the next requests (up to SCHEDULER_PREFETCH) and release the done ones.

        One script call; whether it leased any.
        """
        assert self._book is not None
        self._count_dequeued()
        done = self._done_requests()
        ticket = self._book.ticket(releases=self._releases(done))
        size = self._pacer.size(paced=self._pacing_downloader() is not None)
        entries = self.queue.pop_entries(size, ticket=ticket)
        self._pacer.popped(len(entries))
        lease = self._book.taken_batch(ticket, len(entries))
        self._forget(done)
        self._inc("scheduler/leases/acked", len(done))
        self._inc("scheduler/leases/leased", len(entries))
        if lease is not None:
            self._prefetched.extend((entry, lease, n) for n, entry in enumerate(entries, 1))
        if done and not self._book.held:
            self._announce("idle")
        return bool(entries)

    def _announce(self, news: str) -> None:
        """Tell idle workers to look now (on the queue's news channel): this worker
        released its last leases (``idle``), gave requests back (``returned``) or put
        back a dead worker's (``recovered``)."""
        if not self._news:
            return
        try:
            self.server.publish(self._news, news)
        except ResponseError as exc:  # e.g. an ACL user without access to the channel
            logger.debug(
                "Cannot publish on %(channel)s (%(error)s): idle workers will notice by polling.",
                {"channel": self._news, "error": exc},
                extra={"spider": self.spider},
            )
            self._news = ""

    def _hand_out(self) -> Request | None:
        """The next prefetched request; undecodable entries are set aside (or halt).

        A request whose downloader slot has enough to start for now is held back
        (see pacing.py) and the next ones are tried, up to _MAX_HELD of them. None
        with requests still prefetched: all those tried are held back.
        """
        held: list[tuple[Request, Lease, int]] = []
        request = None
        while self._prefetched and not self._halted and len(held) < _MAX_HELD:
            entry, lease, position = self._prefetched.popleft()
            if isinstance(entry, Entry):
                try:
                    request = self.queue.decode(entry)
                except UndecodableRequestError as exc:
                    self._prefetched.extendleft(reversed(held))  # given back if it halts
                    self._undecodable(entry, lease, position, exc)
                    if held:
                        return None
                    continue
            else:
                request = entry
            if self._downloader is None or not self._held_back(request):
                self._leased.add(_HandedOut.of(request, lease, position))
                break
            held.append((request, lease, position))
            request = None
        if held:
            self._prefetched.extendleft(reversed(held))
            self._pacer.skipped(handed=request is not None)
        return request

    def _pacing_downloader(self) -> Any:
        """The engine's downloader if the settings may delay its slots, else None."""
        if self._may_delay is None:
            crawler = self.crawler
            self._may_delay = bool(crawler and slots_may_have_delays(crawler.settings))
        if self._downloader is None and self._may_delay:
            self._downloader = engine_downloader(self.crawler)
        return self._downloader

    def _held_back(self, request: Request) -> bool:
        """Whether ``request`` must wait: its downloader slot has enough to start for now.

        If so, the engine is asked again when the slot may take it (it also asks
        whenever a download ends).
        """
        try:
            slot = downloader_slot(self._downloader, request, self.crawler)  # type: ignore[arg-type]
        except Exception:  # a downloader unlike Scrapy's: stop pacing, lose nothing
            logger.warning(
                "Cannot read the downloader's slots: not pacing requests any more",
                exc_info=True,
                extra={"spider": self.spider},
            )
            self._downloader = None
            self._may_delay = False
            return False
        wait = self._pacer.hold_back(slot.key, slot.delay, slot.idle)
        if wait and not (self._pace_call is not None and self._pace_call.active()):
            self._pace_call = installed_reactor().callLater(wait, wake_engine, self.crawler)
        return bool(wait)

    def _undecodable(
        self, entry: Entry, lease: Lease, position: int, exc: UndecodableRequestError
    ) -> None:
        if exc.looks_like_pickle:  # wrong SCHEDULER_SERIALIZER: leave the queue as it is
            self._prefetched.appendleft((entry, lease, position))
            self._halt(exc)
            self._redis_call(self._give_back_prefetched, None)
            return
        self._invalid.append((entry, lease, position, str(exc)))
        self._set_aside_invalid()

    def _set_aside_invalid(self) -> None:
        """Move undecodable entries to ``<queue>:invalid`` and release them; those that
        Redis was unreachable for wait here (retried on the next pop and heartbeat,
        given back at close)."""
        assert self._book is not None
        book = self._book
        key = invalid_entries_key(self.queue.key)
        while self._invalid:
            _, lease, position, error = self._invalid[0]

            def set_aside(lease: Lease = lease, n: int = position) -> bool:
                book.set_aside([(lease, [n])], key)
                return True

            if not self._redis_call(set_aside, False):
                return
            del self._invalid[0]
            self._inc("scheduler/invalid/redis")
            logger.error(
                "%(error)s Moved it to %(key)s.",
                {"error": error, "key": key},
                extra={"spider": self.spider},
            )

    def _pop_plain(self) -> Request | None:
        """A queue class of its own: its pop(), no leases."""
        if self._halted:
            return None
        for _ in range(_MAX_SKIPS):
            try:
                return self.queue.pop()  # type: ignore[no-any-return]
            except UndecodableRequestError as exc:
                if exc.looks_like_pickle:
                    self._halt(exc)
                    return None
                self._inc("scheduler/invalid/redis")
                logger.error(
                    "%(error)s Moved it to %(key)s.",
                    {"error": exc, "key": invalid_entries_key(self.queue.key)},
                    extra={"spider": self.spider},
                )
        return None

    def _releases(self, done: list[_HandedOut]) -> list[tuple[Lease, list[int]]]:
        """The leases of ``done`` requests, each with their positions in it."""
        return _by_lease((handed.lease, handed.position) for handed in done)

    def _forget(self, done: list[_HandedOut]) -> None:
        self._leased.difference_update(done)

    def _give_back_prefetched(self) -> None:
        """Put back at once what this halted worker leased and did not hand out; kept
        (and tried again on the heartbeat and at close) until Redis took it."""
        self._give_back_entries([(lease, n) for _, lease, n in self._prefetched])
        self._prefetched.clear()

    def _give_back_entries(self, entries: list[tuple[Lease, int]]) -> int:
        """Put these leased entries back in the queue at once; how many went back."""
        assert self._book is not None
        return self._book.give_back_entries(_by_lease(entries))

    def _done_requests(self, collect: bool = False) -> list[_HandedOut]:
        """The handed-out requests the engine is done with (freed ones included).

        Under a Scrapy without the engine's set of requests in progress, only freed
        ones (see _engine.engine_in_progress); ``collect``: first free those held by
        reference cycles only (on the heartbeat and at close).
        """
        if not self._leased:
            return []
        in_progress = engine_in_progress(self.crawler)
        if in_progress is None:  # no engine: nothing is known to be done
            return []
        if collect and in_progress is EVERY_LIVE_REQUEST:
            gc.collect()
        return [h for h in self._leased if (request := h()) is None or request not in in_progress]

    def _ack_done(self, collect: bool = False) -> None:
        """Release the leases of requests the engine is done with."""
        if self._book is None:
            return
        if done := self._done_requests(collect):
            self._book.release(self._releases(done))
            self._forget(done)
            self._inc("scheduler/leases/acked", len(done))
            if not self._book.held:
                self._announce("idle")

    def _give_back_leases(self) -> None:
        """At close: release what is done, put back at once what is not."""
        if self._book is None:
            return
        self._ack_done(collect=True)
        if self._leased or self._prefetched or self._invalid:
            handed = [(handed.lease, handed.position) for handed in self._leased]
            back = [
                *handed,
                *((lease, n) for _, lease, n in self._prefetched),
                *((lease, n) for _, lease, n, _ in self._invalid),  # another worker sets it aside
            ]
            returned = self._give_back_entries(back)
            self._leased.clear()
            self._prefetched.clear()
            self._invalid.clear()
            self._inc("scheduler/leases/returned", returned)
            if returned:
                self._announce("returned")

    def _recover(self) -> None:
        """Put back the requests leased by workers that died; those that every worker
        taking them died with go to the dead letters."""
        if self._book is None:
            return
        recovered, dead = self._book.recover_expired()
        if recovered:
            logger.info(
                "Recovered %(count)d requests leased by workers that stopped responding",
                {"count": recovered},
                extra={"spider": self.spider},
            )
            self._inc("scheduler/leases/recovered", recovered)
            self._announce("recovered")
        if dead:
            logger.error(
                "Moved %(count)d requests to %(key)s: each was leased %(max)d times by workers "
                "that stopped responding (SCHEDULER_MAX_DELIVERIES). See 'Dead letters' in the "
                "scheduler docs to look at them and requeue them.",
                {"count": dead, "key": self._book.dead_letters_key, "max": self.max_deliveries},
                extra={"spider": self.spider},
            )
            self._inc("scheduler/leases/dead_lettered", dead)

    def _beat(self) -> None:
        """Every third of SCHEDULER_WORKER_TIMEOUT: renew, acknowledge, recover."""
        self._count_dequeued()
        try:
            self._redis_call(self._beat_once, None)
        except Exception:  # a missed heartbeat must not kill the loop
            logger.warning("Worker heartbeat failed", exc_info=True, extra={"spider": self.spider})

    def _beat_once(self) -> None:
        assert self._registry is not None
        self._registry.beat()
        self._send_unsent()
        if self._invalid:
            self._set_aside_invalid()
        if self._halted and self._prefetched:
            self._give_back_prefetched()
        self._ack_done(collect=True)
        if self._book is not None:
            self._book.renew()
        self._recover()

    # -- helpers ------------------------------------------------------------------------

    def _wrong_type(self, exc: ResponseError) -> None:
        """A key holds another type than ours: say which and how to fix it, once, and
        stop (nothing more is written; the shared data is kept)."""
        if self._halted:
            return
        try:
            wrong = wrong_types(self.server, self._key_uses())
        except Exception:  # only to word the message: Redis's own error will do
            wrong = []
        logger.error(
            "%(problem)s Closing the spider.",
            {"problem": describe(wrong) if wrong else exc},
            extra={"spider": self.spider},
        )
        self._stop("redis_wrong_type")

    def _halt(self, exc: UndecodableRequestError) -> None:
        """Stop this worker: the queue holds data it cannot read (left in place)."""
        logger.error("%(error)s Closing the spider.", {"error": exc}, extra={"spider": self.spider})
        self._stop("scheduler_serializer_error")

    def _stop(self, reason: str) -> None:
        self._halted = True
        engine = engine_of(self.crawler)
        if engine is None:
            return
        if hasattr(engine, "close_spider_async"):
            from scrapy.utils.defer import deferred_from_coro

            deferred_from_coro(engine.close_spider_async(reason=reason))
        else:  # Scrapy < 2.14
            engine.close_spider(self.spider, reason=reason)

    def _keep_locally(self, request: Request, exc: Exception) -> None:
        if not self._unserializable_logged:
            logger.warning(
                "Unable to serialize request: %(request)s - reason: %(reason)s - kept in this "
                "worker's memory; no more unserializable requests will be logged (stats being "
                "collected)",
                {"request": shorten(request), "reason": shorten(exc, 1000)},
                extra={"spider": self.spider},
            )
            self._unserializable_logged = True
        self._inc("scheduler/unserializable")
        self._local.push(request)
        self._inc("scheduler/enqueued/memory")
        self._inc("scheduler/enqueued")

    def _queue_is_empty(self) -> bool:
        is_empty = getattr(self.queue, "is_empty", None)
        return bool(is_empty()) if is_empty is not None else len(self.queue) == 0

    def _waiting_before_close(self) -> bool:
        if self.idle_before_close <= 0:
            return False
        if self._empty_since is None:
            self._empty_since = time.monotonic()
        return time.monotonic() - self._empty_since < self.idle_before_close

    def _inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None and count:
            self.stats.inc_value(key, count)
