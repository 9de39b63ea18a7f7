"""Spiders that read their start requests from Redis.

A :class:`RedisSpider` (or :class:`RedisCrawlSpider`) pops batches of start
messages (see :mod:`scrapy_redis.start.messages`) from ``redis_key``: at start, every
REDIS_START_URLS_POLL_INTERVAL seconds while it runs, and whenever it idles.
An idle spider stays open (waiting for messages) unless ``max_idle_time`` is
set; the idle time counts from the moment it last had work, and does not run
while the shared queue still holds requests or another worker is busy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

from scrapy import Request, Spider, signals
from scrapy.exceptions import DontCloseSpider
from scrapy.spiders import CrawlSpider

from scrapy_redis import connection, defaults
from scrapy_redis.core.compat import PerInstance
from scrapy_redis.core.engine import engine_accepts_requests
from scrapy_redis.core.logsafe import short_repr, shorten
from scrapy_redis.scheduling.api import shared_scheduler
from scrapy_redis.scheduling.due import fetch_later
from scrapy_redis.start.filter import FilteredStartRequests
from scrapy_redis.start.idle import IdleTimer
from scrapy_redis.start.messages import (
    StartMessageRules,
    UnknownKeys,
    as_requests,
    parse_message,
    request_from_message,
    unknown_keys,
)
from scrapy_redis.start.polling import Poller
from scrapy_redis.start.reader import StartMessageReader
from scrapy_redis.start.settings import (
    StartSettings,
    ignored_start_urls,
    normalize_redis_key,
    read_start_settings,
)
from scrapy_redis.store.outage import OUTAGE_ERRORS, outage_guard
from scrapy_redis.store.permissions import check_access
from scrapy_redis.utils import bytes_to_str

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

__all__ = ["RedisCrawlSpider", "RedisMixin", "RedisSpider", "normalize_redis_key"]

logger = logging.getLogger(__name__)


class RedisMixin:
    """Reads start messages from ``redis_key``; mix it into any spider class.

    Attributes (each may also be given as a spider argument, ``-a name=value``):
    ``redis_key`` (REDIS_START_URLS_KEY), ``redis_batch_size``
    (REDIS_START_URLS_BATCH_SIZE, then CONCURRENT_REQUESTS), ``redis_encoding``
    (REDIS_ENCODING), ``redis_key_check_interval`` (REDIS_KEY_CHECK_INTERVAL) and
    ``max_idle_time`` (MAX_IDLE_TIME_BEFORE_CLOSE).

    The work is done by parts built in :meth:`setup_redis`: the settings
    (:mod:`scrapy_redis.start.settings`), the reader of start messages and their
    leases (:attr:`redis_start_messages`, :mod:`scrapy_redis.start.reader`), the
    count of filtered start requests (:mod:`scrapy_redis.start.filter`), the idle
    timer (:mod:`scrapy_redis.start.idle`) and the polling loops
    (:mod:`scrapy_redis.start.polling`). This class connects them to Scrapy.
    """

    redis_key: Any = None
    redis_batch_size: Any = None
    redis_encoding: str | None = None
    redis_key_check_interval: Any = None
    max_idle_time: Any = None
    server: Any = None
    #: Wall-clock time (seconds) at which the current idle period began, or None.
    spider_idle_start_time: int | None = None
    #: Pops start messages under leases, renews and gives them back (built by setup_redis).
    redis_start_messages: StartMessageReader | None = None
    # Defaults for subclasses whose setup_redis() does not call ours.
    _redis_keys: list[str] | None = None  # the start keys (the original's attribute)
    _start_settings: StartSettings | None = None
    _filtered = PerInstance(lambda self: FilteredStartRequests(self._inc, self))
    _idle = PerInstance(lambda _: IdleTimer())
    _unknown_keys = PerInstance(lambda self: UnknownKeys(self._inc, self))
    _poller: Poller | None = None

    # provided by scrapy.Spider
    name: str
    crawler: Crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> Self:
        """Build the spider (the next class in the MRO does), then :meth:`setup_redis`."""
        spider = super().from_crawler(crawler, *args, **kwargs)  # type: ignore[misc]
        spider.setup_redis(crawler)
        return spider  # type: ignore[no-any-return]

    def start_requests(self) -> Iterable[Request]:
        """The first batch of requests (for Scrapy < 2.13, and called by :meth:`start`)."""
        return self.next_requests()

    async def start(self) -> AsyncIterator[Any]:
        for request in self.start_requests():
            yield request
        self._ack_start_messages()  # every request of the batch is scheduled now

    def setup_redis(self, crawler: Crawler | None = None) -> None:
        """Read the settings, connect to Redis, build the parts and hook the spider signals."""
        if self.server is not None:
            return
        crawler = crawler or getattr(self, "crawler", None)
        if crawler is None:
            raise ValueError("crawler is required")
        config = self._apply_settings(read_start_settings(self, crawler.settings))
        self.server = connection.from_settings(crawler.settings)  # the original's lookup
        connection.ensure_reachable(self.server)  # fail fast, naming the server
        check_access(self.server, [(k, "redis_key") for k in config.keys], "spider", crawler)
        guard = outage_guard(crawler)
        self.redis_start_messages = StartMessageReader.build(
            self.server, config, guard, self._inc, self
        )
        self._filtered = FilteredStartRequests(self._inc, self)
        self._idle = IdleTimer()
        self._poller = None
        logger.info(
            "Reading start URLs from redis key(s) %(keys)s at %(server)s (batch size: "
            "%(size)s, encoding: %(encoding)s)",
            {
                "keys": ", ".join(config.keys),
                "server": connection.describe_server(self.server),
                "size": config.batch_size,
                "encoding": config.encoding,
            },
            extra={"spider": self},
        )
        self._warn_ignored_start_urls(config)
        self._connect_signals(crawler)

    def _warn_ignored_start_urls(self, config: StartSettings) -> None:
        """Warn if ``start_urls`` is set but unread (start requests are not overridden)."""
        cls = type(self)
        if cls.start_requests is not RedisMixin.start_requests or cls.start is not RedisMixin.start:
            return
        if warning := ignored_start_urls(self, config.keys):
            logger.warning("%(warning)s", {"warning": warning}, extra={"spider": self})

    def _apply_settings(self, config: StartSettings) -> StartSettings:
        """Keep ``config`` and show its values in the spider's public attributes."""
        self._start_settings = config
        self._redis_keys = list(config.keys)
        self.redis_key = config.keys[0]
        self.redis_batch_size = config.batch_size
        self.redis_encoding = config.encoding
        self.redis_key_check_interval = config.key_check_interval
        self.max_idle_time = config.max_idle_time
        return config

    def _connect_signals(self, crawler: Crawler) -> None:
        crawler.signals.connect(self._on_activity, signal=signals.response_received)
        crawler.signals.connect(self._start_polling, signal=signals.spider_opened)
        crawler.signals.connect(self._stop_polling, signal=signals.spider_closed)
        crawler.signals.connect(self._on_dropped, signal=signals.request_dropped)
        # Last, as the original's only connect: users' tests assert the last call.
        crawler.signals.connect(self.spider_idle, signal=signals.spider_idle)

    # -- reading messages -------------------------------------------------------------

    def next_requests(self) -> list[Request]:
        """Pop one batch of start messages and return the requests made from them.

        A message that cannot be turned into a request is logged, counted in
        ``redis/start_messages/invalid`` and set aside in ``<first start key>:invalid``
        (``scrapy redis export SPIDER invalid``); the rest of its batch is kept.
        """
        self._ack_start_messages()  # the previous batch has been consumed
        reader = self._reader()
        key, messages = reader.pop(self.redis_batch_size)
        if messages:
            self._idle.busy()
        requests: list[Request] = []
        invalid: list[int] = []
        for position, data in enumerate(messages):
            made = self._requests_from_message(key, data)
            encoding = self.redis_encoding or "utf-8"
            if made is None or (made and not reader.recurs(key, data, made, encoding)):
                invalid.append(position)
            else:
                requests.extend(made)
        if invalid:  # kept for export and requeue --invalid, not dropped
            reader.set_aside(invalid)
        return requests

    def _requests_from_message(self, key: str | None, data: bytes) -> list[Request] | None:
        """The requests of one message; None if it is invalid (logged and counted)."""
        self._inc("redis/start_messages/read")
        rules = self._message_rules()
        try:
            rules.check_size(data)  # before it is decoded: a huge message costs no memory
            requests = as_requests(self.make_request_from_data(data))
            rules.check_requests(requests)  # (a make_request_from_data() of one's own too)
        except Exception as exc:  # a bad message must never stop the spider
            self._inc("redis/start_messages/invalid")
            logger.warning(
                "Skipping start message from %(key)s: %(reason)s: %(data)s",
                {"key": key, "reason": shorten(exc), "data": short_repr(data, 200)},
                extra={"spider": self},
            )
            return None
        self._filtered.watch(requests)
        if not requests:
            logger.debug(
                "Request not made from data: %(data)s",
                {"data": short_repr(data, 200)},
                extra={"spider": self},
            )
        return requests

    def make_request_from_data(self, data: bytes) -> Request | Iterable[Request] | None:
        """The request for one start message (override to customise)."""
        fields = parse_message(bytes_to_str(data, self.redis_encoding or "utf-8"))
        if unknown := unknown_keys(fields):
            self._unknown_keys.found(unknown)
        return request_from_message(fields, self, dont_filter=self._dont_filter())  # type: ignore[arg-type]

    def _message_rules(self) -> StartMessageRules:
        """REDIS_START_URLS_SCHEMES / _MAX_SIZE (the defaults if our setup_redis() was not
        called)."""
        config = self._start_settings
        return config.message_rules if config is not None else StartMessageRules()

    def _dont_filter(self) -> bool:
        """REDIS_START_URLS_DONT_FILTER (read here too if our setup_redis() was not called)."""
        if self._start_settings is not None:
            return self._start_settings.dont_filter
        return self.crawler.settings.getbool(
            "REDIS_START_URLS_DONT_FILTER", defaults.START_URLS_DONT_FILTER
        )

    def _reader(self) -> StartMessageReader:
        if self.redis_start_messages is None:
            raise RuntimeError(
                f"{type(self).__name__}.setup_redis() did not build the reader of start "
                "messages: call RedisMixin.setup_redis() (or override next_requests() too)"
            )
        return self.redis_start_messages

    def schedule_next_requests(self) -> int:
        """Pop one batch and hand its requests to the engine; returns how many."""
        requests = list(self.next_requests())  # an override may be a generator
        for request in requests:
            self.crawler.engine.crawl(request)
        self._ack_start_messages()
        return len(requests)

    def _ack_start_messages(self) -> None:
        """Release the leases of start messages whose requests are scheduled."""
        reader = self.redis_start_messages
        if reader is None or not reader.unacked:
            return
        scheduler = shared_scheduler(self.crawler)
        if scheduler is not None and not scheduler.send_enqueued():
            return  # their requests wait in memory for Redis: keep the leases
        reader.ack()
        self._filtered.report()  # every request of the batch has met the filter now

    def _on_dropped(self, request: Request) -> None:
        self._filtered.dropped(request)

    def fetch_later(self, request: Request, seconds: float, dont_filter: bool = True) -> Request:
        """``request`` to be fetched no sooner than ``seconds`` after it is scheduled, by
        the Redis server's clock (``meta["due_in"]``: see docs/incremental.rst); it waits in
        Redis meanwhile. ``dont_filter`` (default) lets a page crawled already be fetched
        again (a revisit, a retry)."""
        return fetch_later(request, seconds, dont_filter)

    # -- idling -------------------------------------------------------------------------

    def spider_idle(self) -> None:
        """Keep the spider open while there is or may be work, or until max_idle_time."""
        if self.server is None:
            return
        if self._schedule_safely() or self._shared_work_pending():
            self._idle.busy()
            raise DontCloseSpider
        if outage_guard(self.crawler).down:  # the scheduler closes after REDIS_OUTAGE_TIMEOUT
            raise DontCloseSpider
        if not self._idle.running:
            self.spider_idle_start_time = int(time.time())
        if self._idle.expired(self.max_idle_time):
            return
        raise DontCloseSpider

    def _schedule_safely(self) -> int:
        guard = outage_guard(self.crawler)
        if not guard.may_try():
            return 0
        try:
            scheduled = self.schedule_next_requests()
        except OUTAGE_ERRORS as exc:
            guard.failed(exc)
            return 0
        except Exception:
            logger.warning(
                "Could not read start messages from Redis", exc_info=True, extra={"spider": self}
            )
            return 0
        guard.succeeded()
        return scheduled

    def _shared_work_pending(self) -> bool:
        scheduler = shared_scheduler(self.crawler)
        if scheduler is not None and scheduler.shared_work_pending():
            return True
        reader = self.redis_start_messages  # a recurring run due within max_idle_time
        return reader is not None and reader.run_due_within(self.max_idle_time)

    def _on_activity(self) -> None:
        self._idle.busy()

    # -- polling ------------------------------------------------------------------------

    def _start_polling(self) -> None:
        """spider_opened: start the lease heartbeat and, if enabled, the polling."""
        reader, config = self._reader(), self._start_settings
        assert config is not None  # set with the reader
        self._poller = Poller()
        self._poller.every(reader.heartbeat_interval, reader.beat)
        if config.poll_interval > 0:
            self._poller.every(config.poll_interval, self._poll)

    def _poll(self) -> None:
        if engine_accepts_requests(self.crawler):
            self._schedule_safely()

    def _stop_polling(self) -> None:
        """spider_closed: stop the loops and put back the messages never scheduled."""
        self._filtered.report()
        if self._poller is not None:
            self._poller.stop()
        if self.redis_start_messages is not None:
            self.redis_start_messages.give_back()  # popped, never scheduled

    def _inc(self, key: str, count: int = 1) -> None:
        stats = getattr(self.crawler, "stats", None)
        if stats is not None:
            stats.inc_value(key, count)


class RedisSpider(RedisMixin, Spider):
    """Spider that reads its start requests from ``redis_key``."""


class RedisCrawlSpider(RedisMixin, CrawlSpider):
    """CrawlSpider that reads its start requests from ``redis_key``."""
