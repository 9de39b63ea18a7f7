"""An item pipeline that appends every item, as JSON, to a Redis list."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections import deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from redis.crc import key_slot
from scrapy.utils.serialize import ScrapyJSONEncoder
from twisted.internet.defer import Deferred

from scrapy_redis import connection, defaults
from scrapy_redis.connection import is_cluster
from scrapy_redis.core.compat import PerInstance
from scrapy_redis.core.engine import installed_reactor
from scrapy_redis.exceptions import ScriptsUnavailableError, warn_from_settings
from scrapy_redis.store.keys import format_key
from scrapy_redis.store.outage import OUTAGE_ERRORS, OutageGuard, outage_guard
from scrapy_redis.store.scripts import script
from scrapy_redis.store.writes import WriteIds, writes_ttl
from scrapy_redis.utils import load_configured

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from twisted.internet.base import DelayedCall
    from typing_extensions import Self

default_serialize = ScrapyJSONEncoder().encode
logger = logging.getLogger(__name__)

#: An item not stored yet: (list key, serialized item, write number).
Pending = tuple[str, str | bytes, int]


class RedisPipeline:
    """Pushes serialized items to REDIS_ITEMS_KEY (default ``<spider>:items``).

    Items are appended (``RPUSH``, in a script) in batches, in the order they were
    processed, each once even when a call is sent again (see writes.py): an item
    waits in the worker for at most REDIS_ITEMS_DELAY seconds, or until
    REDIS_ITEMS_BATCH_SIZE items wait, and ``process_item()`` returns an awaitable
    that gives the item back once it is stored. So Scrapy's engine is done with a
    request only when its items are in Redis, and the scheduler acknowledges its lease
    only then: a worker killed with items in memory loses none, their requests are
    leased again. While Redis is unreachable items wait in memory, in order, and are
    pushed when it is back. Outside a running reactor (a script calling
    ``process_item()`` itself) or with REDIS_ITEMS_DELAY = 0, each item is pushed at
    once and returned. Settings: REDIS_ITEMS_KEY, REDIS_ITEMS_SERIALIZER (dotted path
    to a callable, default: Scrapy's JSON encoder), REDIS_ITEMS_BATCH_SIZE,
    REDIS_ITEMS_DELAY.
    """

    # Defaults for subclasses whose __init__ does not call ours.
    server: Any = None
    key = defaults.PIPELINE_KEY
    serialize: Callable[[Any], str | bytes] = staticmethod(default_serialize)
    crawler: Crawler | None = None
    batch_size = defaults.REDIS_ITEMS_BATCH_SIZE
    delay = defaults.REDIS_ITEMS_DELAY
    #: What schedules the pushes (None: Twisted's reactor; tests give a Clock).
    clock: Any = None
    guard = PerInstance(lambda _: OutageGuard(300))
    _pending = PerInstance(lambda _: list[Pending]())
    _waiting = PerInstance(lambda _: deque[tuple[int, Deferred[None]]]())
    _timer: DelayedCall | None = None
    _writes = PerInstance(lambda _: WriteIds())

    def __init__(
        self,
        server: Any,
        key: str = defaults.PIPELINE_KEY,
        serialize_func: Callable[[Any], str | bytes] = default_serialize,
    ) -> None:
        self.server = server
        self.key = key
        self.serialize = serialize_func
        self.crawler: Crawler | None = None
        self.guard = OutageGuard(300)
        self._pending = []  # items not stored yet, in order
        self._waiting = deque()  # (write number, fired once that item is stored)
        self._writes = WriteIds()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        server = connection.from_settings(crawler.settings)  # the original's lookup
        pipeline = cls(server, **cls._kwargs(crawler.settings))
        pipeline.crawler = crawler
        pipeline.guard = outage_guard(crawler)
        pipeline.guard.on_recovery(pipeline._push_pending)
        pipeline._writes = WriteIds(writes_ttl(crawler.settings))
        pipeline.batch_size, pipeline.delay = _batching(crawler.settings)
        return pipeline

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        """Deprecated: use :meth:`from_crawler` (Scrapy no longer calls from_settings)."""
        warn_from_settings("RedisPipeline")
        return cls(connection.from_settings(settings), **cls._kwargs(settings))

    @staticmethod
    def _kwargs(settings: BaseSettings) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if settings.get("REDIS_ITEMS_KEY"):
            kwargs["key"] = settings.get("REDIS_ITEMS_KEY")
        if settings.get("REDIS_ITEMS_SERIALIZER"):
            serializer = settings.get("REDIS_ITEMS_SERIALIZER")
            kwargs["serialize_func"] = load_configured("REDIS_ITEMS_SERIALIZER", serializer)
        return kwargs

    def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        spider = spider or (self.crawler.spider if self.crawler is not None else None)
        data = self.serialize(item)
        write = self._writes.take()
        self._pending.append((self.item_key(item, spider), data, write))
        if not self._batching():
            self._push_pending()
            return item
        if len(self._pending) >= self.batch_size:
            self._push_pending()
        if not self._pending or self._pending[0][2] > write:
            return item  # stored already
        stored: Deferred[None] = Deferred()
        self._waiting.append((write, stored))
        self._schedule_push()
        return _when_stored(stored, item)

    def flush(self) -> None:
        """Push the items waiting in this worker now, unless Redis is unreachable."""
        self._push_pending()

    def close_spider(self, spider: Spider | None = None) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._push_pending(force=True)
        if self._pending:
            logger.error(
                "Redis is unreachable: %(count)d items could not be stored",
                {"count": len(self._pending)},
            )
            self._release_waiting(len(self._waiting))
        else:
            self.guard.attempt(lambda: self._writes.forget(self.server), None)

    def _batching(self) -> bool:
        """Whether items wait to be pushed together: only where a timer will push them."""
        if self.delay <= 0:
            return False
        if self.clock is not None:
            return True
        reactor = sys.modules.get("twisted.internet.reactor")  # never install one here
        return bool(getattr(reactor, "running", False))

    def _schedule_push(self) -> None:
        if self._timer is None or not self._timer.active():
            clock = self.clock if self.clock is not None else installed_reactor()
            self._timer = clock.callLater(self.delay, self._on_timer)

    def _on_timer(self) -> None:
        # What Redis refuses (not an outage) goes to the items' awaitables: Scrapy logs it.
        with contextlib.suppress(Exception):
            self._push_pending()
        if self._pending:  # Redis unreachable: try again (the guard says when)
            if self.guard.expired():  # the crawl closes: let the engine finish
                self._release_waiting(len(self._waiting))
            self._schedule_push()

    def _push_pending(self, force: bool = False) -> None:
        """Push the items kept, in order, in batches of REDIS_ITEMS_BATCH_SIZE (a batch
        all or none); each batch's waiting items are then given back to Scrapy."""
        while self._pending and (force or self.guard.may_try()):
            batch = self._pending[: max(1, self.batch_size)]
            try:
                self._push(batch)
            except OUTAGE_ERRORS as exc:
                self.guard.failed(exc)
                return
            except Exception as exc:
                self._drop(batch, exc)
                raise
            del self._pending[: len(batch)]  # before succeeded(): it calls _push_pending() again
            self._release_stored(batch[-1][2])
            self.guard.succeeded()

    def _release_stored(self, last_write: int) -> None:
        """Give back the waiting items numbered up to ``last_write`` (stored)."""
        released = []
        while self._waiting and self._waiting[0][0] <= last_write:
            released.append(self._waiting.popleft()[1])
        for stored in released:
            stored.callback(None)

    def _release_waiting(self, count: int) -> None:
        """Give back the first ``count`` waiting items without storing them (logged)."""
        released = [self._waiting.popleft()[1] for _ in range(min(count, len(self._waiting)))]
        for stored in released:
            stored.callback(None)

    def _drop(self, batch: list[Pending], exc: Exception) -> None:
        """A batch Redis refused (e.g. a list key of another type): its items fail."""
        del self._pending[: len(batch)]
        failed = []
        while self._waiting and self._waiting[0][0] <= batch[-1][2]:
            failed.append(self._waiting.popleft()[1])
        for stored in failed:
            stored.errback(exc)

    def _push(self, pending: list[Pending]) -> None:
        """One script call: every item appended to its list, at most once; on a Redis
        Cluster one per hash slot of the lists (items routed to lists in several slots):
        a call sent again after a failure skips what the first calls appended."""
        if not is_cluster(self.server):
            self._push_one_call(pending)
            return
        by_slot: dict[int, list[Pending]] = {}
        for item in pending:
            by_slot.setdefault(key_slot(item[0].encode()), []).append(item)
        for group in by_slot.values():
            self._push_one_call(group)

    def _push_one_call(self, pending: list[Pending]) -> None:
        keys: list[str] = []
        args: list[Any] = [self._writes.ttl_ms]
        number: dict[str, int] = {}  # list key -> its pair's number in KEYS
        for key, data, write in pending:
            if key not in number:
                number[key] = len(number) + 1
                keys += [key, self._writes.key(key)]
            args += [number[key], write, data]
        try:
            script("push_items")(self.server, keys, args)
        except ScriptsUnavailableError:  # a test's stand-in for the client: the original's
            for key, data, _write in pending:
                self.server.rpush(key, data)

    def item_key(self, item: Any, spider: Spider | None) -> str:
        """The list ``item`` goes to (override to route items)."""
        return format_key(self.key, spider.name if spider is not None else "scrapy")


def _batching(settings: BaseSettings) -> tuple[int, float]:
    """REDIS_ITEMS_BATCH_SIZE (at most CONCURRENT_ITEMS: Scrapy awaits no more items of
    one response at once, so a larger batch would wait for its delay) and
    REDIS_ITEMS_DELAY, checked."""
    size = settings.getint("REDIS_ITEMS_BATCH_SIZE", defaults.REDIS_ITEMS_BATCH_SIZE)
    delay = settings.getfloat("REDIS_ITEMS_DELAY", defaults.REDIS_ITEMS_DELAY)
    if size < 1:
        raise ValueError(
            f"REDIS_ITEMS_BATCH_SIZE must be at least 1, not {size}: set the most items "
            "pushed by one call (e.g. 100)."
        )
    if delay < 0:
        raise ValueError(
            f"REDIS_ITEMS_DELAY must not be negative, not {delay}: set 0 to push each item at once."
        )
    return min(size, max(1, settings.getint("CONCURRENT_ITEMS", size))), delay


def _when_stored(stored: Deferred[None], item: Any) -> Coroutine[Any, Any, Any]:
    """An awaitable giving ``item`` back once ``stored`` fires, in the reactor Scrapy
    runs (a coroutine, not a Deferred: Scrapy 2.14+ warns about returned Deferreds)."""

    async def wait() -> Any:
        try:
            in_task = asyncio.current_task() is not None
        except RuntimeError:  # no asyncio loop runs
            in_task = False
        if in_task:  # an asyncio task (Scrapy with the asyncio reactor) awaits futures
            await stored.asFuture(asyncio.get_running_loop())
        else:  # a coroutine driven by Twisted awaits Deferreds
            await stored
        return item

    return wait()
