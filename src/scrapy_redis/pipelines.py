"""An item pipeline that appends every item, as JSON, to a Redis list."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.crc import key_slot
from scrapy.utils.serialize import ScrapyJSONEncoder

from scrapy_redis import connection, defaults
from scrapy_redis.connection import is_cluster
from scrapy_redis.core.compat import PerInstance
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
    from typing_extensions import Self

default_serialize = ScrapyJSONEncoder().encode


class RedisPipeline:
    """Pushes serialized items to REDIS_ITEMS_KEY (default ``<spider>:items``).

    Each item is appended (``RPUSH``, in a script) as it is processed, so a
    worker's items are stored in the order it scraped them, each once even when
    the call is sent again (see writes.py). While Redis is unreachable items wait
    in memory, in order, and are pushed (in one script call) when it is back.
    Settings: REDIS_ITEMS_KEY,
    REDIS_ITEMS_SERIALIZER (dotted path to a callable, default: Scrapy's JSON
    encoder).
    """

    # Defaults for subclasses whose __init__ does not call ours.
    server: Any = None
    key = defaults.PIPELINE_KEY
    serialize: Callable[[Any], str | bytes] = staticmethod(default_serialize)
    crawler: Crawler | None = None
    guard = PerInstance(lambda _: OutageGuard(300))
    _pending = PerInstance(lambda _: list[tuple[str, str | bytes, int]]())
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
        self._pending = []  # items not stored yet: (list key, serialized item, write number)
        self._writes = WriteIds()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        server = connection.from_settings(crawler.settings)  # the original's lookup
        pipeline = cls(server, **cls._kwargs(crawler.settings))
        pipeline.crawler = crawler
        pipeline.guard = outage_guard(crawler)
        pipeline.guard.on_recovery(pipeline._push_pending)
        pipeline._writes = WriteIds(writes_ttl(crawler.settings))
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
        self._pending.append((self.item_key(item, spider), data, self._writes.take()))
        self._push_pending()
        return item

    def close_spider(self, spider: Spider | None = None) -> None:
        self._push_pending(force=True)
        if self._pending:
            logging.getLogger(__name__).error(
                "Redis is unreachable: %(count)d items could not be stored",
                {"count": len(self._pending)},
            )
        else:
            self.guard.attempt(lambda: self._writes.forget(self.server), None)

    def _push_pending(self, force: bool = False) -> None:
        """Push the items kept while Redis was unreachable, in order, all or none."""
        if not self._pending or not (force or self.guard.may_try()):
            return
        pushing = len(self._pending)
        try:
            self._push(self._pending)
        except OUTAGE_ERRORS as exc:
            self.guard.failed(exc)
            return
        del self._pending[:pushing]  # before succeeded(): it calls _push_pending() again
        self.guard.succeeded()

    def _push(self, pending: list[tuple[str, str | bytes, int]]) -> None:
        """One script call: every item appended to its list, at most once; on a Redis
        Cluster one per hash slot of the lists (items routed to lists in several slots):
        a call sent again after a failure skips what the first calls appended."""
        if not is_cluster(self.server):
            self._push_one_call(pending)
            return
        by_slot: dict[int, list[tuple[str, str | bytes, int]]] = {}
        for item in pending:
            by_slot.setdefault(key_slot(item[0].encode()), []).append(item)
        for group in by_slot.values():
            self._push_one_call(group)

    def _push_one_call(self, pending: list[tuple[str, str | bytes, int]]) -> None:
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
