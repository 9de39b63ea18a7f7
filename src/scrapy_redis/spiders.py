"""Spiders that read their start requests from Redis.

A :class:`RedisSpider` (or :class:`RedisCrawlSpider`) pops batches of start
messages (see :mod:`scrapy_redis.messages`) from ``redis_key``: at start, every
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
from weakref import WeakSet

from scrapy import Request, Spider, signals
from scrapy.exceptions import DontCloseSpider
from scrapy.spiders import CrawlSpider
from twisted.internet import task

from scrapy_redis import connection, defaults
from scrapy_redis._compat import PerInstance
from scrapy_redis._engine import engine_accepts_requests
from scrapy_redis.keys import format_key
from scrapy_redis.leases import LeaseBook
from scrapy_redis.logsafe import short_repr, shorten
from scrapy_redis.messages import parse_message, request_from_message
from scrapy_redis.outage import OUTAGE_ERRORS, outage_guard
from scrapy_redis.scheduler_api import shared_scheduler
from scrapy_redis.start_urls import StartUrlSource
from scrapy_redis.utils import bytes_to_str
from scrapy_redis.workers import new_worker_id

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from typing_extensions import Self

logger = logging.getLogger(__name__)


def normalize_redis_key(value: Any, spider_name: str) -> list[str]:
    """``redis_key`` (a template or a list of them, highest priority first) as key names."""
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("redis_key must not be empty")
        return [format_key(value, spider_name)]
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"redis_key must be a string or a list of strings, not {value!r}")
    keys: list[str] = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"redis_key must not contain empty or non-string keys: {value!r}")
        key = format_key(item.strip(), spider_name)
        if key not in keys:
            keys.append(key)
    if not keys:
        raise ValueError("redis_key list is empty after normalization")
    return keys


def _as_positive_int(value: Any, name: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, not {value!r}") from None
    if number <= 0:
        raise ValueError(f"{name} must be positive, not {value!r}")
    return number


def _as_seconds(value: Any, name: str) -> float:
    if value in (None, "", "0"):
        return 0
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number of seconds, not {value!r}") from None


def _as_interval(value: Any, name: str) -> float:
    seconds = _as_seconds(value, name)
    if seconds < 0:
        raise ValueError(f"{name} cannot be negative, not {value!r}")
    return seconds


def _start_mode(settings: BaseSettings) -> str:
    if settings.getbool("REDIS_START_URLS_AS_SET", defaults.START_URLS_AS_SET):
        return "set"
    if settings.getbool("REDIS_START_URLS_AS_ZSET", defaults.START_URLS_AS_ZSET):
        return "zset"
    return "list"


class RedisMixin:
    """Reads start messages from ``redis_key``; mix it into any spider class.

    Attributes (each may also be given as a spider argument, ``-a name=value``):
    ``redis_key`` (REDIS_START_URLS_KEY), ``redis_batch_size``
    (REDIS_START_URLS_BATCH_SIZE, then CONCURRENT_REQUESTS), ``redis_encoding``
    (REDIS_ENCODING), ``redis_key_check_interval`` (REDIS_KEY_CHECK_INTERVAL) and
    ``max_idle_time`` (MAX_IDLE_TIME_BEFORE_CLOSE).
    """

    redis_key: Any = None
    redis_batch_size: Any = None
    redis_encoding: str | None = None
    redis_key_check_interval: Any = None
    max_idle_time: Any = None
    server: Any = None
    #: Wall-clock time (seconds) at which the current idle period began, or None.
    spider_idle_start_time: int | None = None
    # Defaults for subclasses whose setup_redis() does not call ours.
    _unacked = PerInstance(lambda _: list[str]())
    _filterable = PerInstance(lambda _: WeakSet[Request]())  # start requests the filter may drop
    _filtered = 0
    _idle_since: float | None = None
    _poller: task.LoopingCall | None = None
    _heartbeat: task.LoopingCall | None = None

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
        """Read the settings, connect to Redis and hook the spider signals."""
        if self.server is not None:
            return
        crawler = crawler or getattr(self, "crawler", None)
        if crawler is None:
            raise ValueError("crawler is required")
        self._read_redis_settings(crawler.settings)
        self.server = connection.from_settings(crawler.settings)  # the original's lookup
        connection.ensure_reachable(self.server)  # fail fast, naming the server
        self._start_source = StartUrlSource(
            self.server,
            self._redis_keys,
            _start_mode(crawler.settings),
            self.redis_key_check_interval,
        )
        timeout = crawler.settings.getfloat(
            "SCHEDULER_WORKER_TIMEOUT", defaults.SCHEDULER_WORKER_TIMEOUT
        )
        self._leases = LeaseBook(
            self.server,
            self._redis_keys[0],
            new_worker_id(),
            timeout,
            crawler.settings.getint("SCHEDULER_MAX_DELIVERIES", defaults.SCHEDULER_MAX_DELIVERIES),
        )
        self._unacked = []
        self._filterable = WeakSet()
        self._filtered = 0
        self._idle_since = None
        self._poller = None
        self._heartbeat = None
        logger.info(
            "Reading start URLs from redis key(s) %(keys)s (batch size: %(size)s, encoding: "
            "%(encoding)s)",
            {
                "keys": ", ".join(self._redis_keys),
                "size": self.redis_batch_size,
                "encoding": self.redis_encoding,
            },
            extra={"spider": self},
        )
        crawler.signals.connect(self.spider_idle, signal=signals.spider_idle)
        crawler.signals.connect(self._on_activity, signal=signals.response_received)
        crawler.signals.connect(self._start_polling, signal=signals.spider_opened)
        crawler.signals.connect(self._stop_polling, signal=signals.spider_closed)
        crawler.signals.connect(self._on_dropped, signal=signals.request_dropped)

    def _read_redis_settings(self, settings: BaseSettings) -> None:
        self._redis_keys = normalize_redis_key(
            self.redis_key
            if self.redis_key is not None  # "" and [] are refused, not replaced
            else settings.get("REDIS_START_URLS_KEY", defaults.START_URLS_KEY),
            self.name,
        )
        self.redis_key = self._redis_keys[0]
        self.redis_batch_size = _as_positive_int(
            self.redis_batch_size
            or settings.get("REDIS_START_URLS_BATCH_SIZE")
            or settings.getint("CONCURRENT_REQUESTS", defaults.REDIS_CONCURRENT_REQUESTS),
            "redis_batch_size",
        )
        self.redis_encoding = self.redis_encoding or settings.get(
            "REDIS_ENCODING", defaults.REDIS_ENCODING
        )
        self.redis_key_check_interval = _as_interval(
            self.redis_key_check_interval
            if self.redis_key_check_interval is not None
            else settings.get("REDIS_KEY_CHECK_INTERVAL", defaults.REDIS_KEY_CHECK_INTERVAL),
            "redis_key_check_interval",
        )
        self.max_idle_time = _as_seconds(
            self.max_idle_time
            if self.max_idle_time is not None
            else settings.get("MAX_IDLE_TIME_BEFORE_CLOSE", defaults.MAX_IDLE_TIME),
            "max_idle_time",
        )
        self._dont_filter = settings.getbool(
            "REDIS_START_URLS_DONT_FILTER", defaults.START_URLS_DONT_FILTER
        )
        self._poll_interval = settings.getfloat(
            "REDIS_START_URLS_POLL_INTERVAL", defaults.START_URLS_POLL_INTERVAL
        )

    # -- reading messages -------------------------------------------------------------

    def next_requests(self) -> list[Request]:
        """Pop one batch of start messages and return the requests made from them.

        A message that cannot be turned into a request is logged, counted in
        ``redis/start_messages/invalid`` and skipped; the rest of its batch is kept.
        """
        self._ack_start_messages()  # the previous batch has been consumed
        key, messages, lease_ids = self._start_source.pop(self.redis_batch_size, self._leases)
        self._unacked.extend(lease_ids)
        if messages:
            self._idle_since = None
        requests: list[Request] = []
        for data in messages:
            requests.extend(self._requests_from_message(key, data))
        return requests

    def _requests_from_message(self, key: str | None, data: bytes) -> list[Request]:
        self._inc("redis/start_messages/read")
        try:
            requests = self._as_requests(self.make_request_from_data(data))
        except Exception as exc:  # a bad message must never stop the spider
            self._inc("redis/start_messages/invalid")
            logger.warning(
                "Skipping start message from %(key)s: %(reason)s: %(data)s",
                {"key": key, "reason": shorten(exc), "data": short_repr(data, 200)},
                extra={"spider": self},
            )
            return []
        self._filterable.update(request for request in requests if not request.dont_filter)
        if not requests:
            logger.debug(
                "Request not made from data: %(data)s",
                {"data": short_repr(data, 200)},
                extra={"spider": self},
            )
        return requests

    @staticmethod
    def _as_requests(result: Any) -> list[Request]:
        if result is None:
            return []
        items = [result] if isinstance(result, Request) else list(result)
        for item in items:
            if not isinstance(item, Request):
                raise TypeError(f"make_request_from_data() returned {item!r}, not a Request")
        return items

    def make_request_from_data(self, data: bytes) -> Request | Iterable[Request] | None:
        """The request for one start message (override to customise)."""
        fields = parse_message(bytes_to_str(data, self.redis_encoding or "utf-8"))
        return request_from_message(fields, self, dont_filter=self._dont_filter)  # type: ignore[arg-type]

    def schedule_next_requests(self) -> int:
        """Pop one batch and hand its requests to the engine; returns how many."""
        requests = list(self.next_requests())  # an override may be a generator
        for request in requests:
            self.crawler.engine.crawl(request)
        self._ack_start_messages()
        return len(requests)

    def _ack_start_messages(self) -> None:
        """Release the leases of start messages whose requests are scheduled."""
        if not self._unacked:
            return
        scheduler = shared_scheduler(self.crawler)
        if scheduler is not None and not scheduler.send_enqueued():
            return  # their requests wait in memory for Redis: keep the leases
        if self._unacked:
            self._leases.ack(self._unacked)
            self._unacked = []
        self._report_filtered()  # every request of the batch has met the filter now

    def _on_dropped(self, request: Request) -> None:
        if request in self._filterable:
            self._filterable.discard(request)
            self._filtered += 1
            self._inc("redis/start_requests/filtered")

    def _report_filtered(self) -> None:
        if self._filtered:
            logger.info(
                "Start requests filtered as duplicates of requests seen before: %(count)d "
                "(see REDIS_START_URLS_DONT_FILTER)",
                {"count": self._filtered},
                extra={"spider": self},
            )
            self._filtered = 0

    # -- idling -------------------------------------------------------------------------

    def spider_idle(self) -> None:
        """Keep the spider open while there is or may be work, or until max_idle_time."""
        if self.server is None:
            return
        if self._schedule_safely() or self._shared_work_pending():
            self._idle_since = None
            raise DontCloseSpider
        if outage_guard(self.crawler).down:  # the scheduler closes after REDIS_OUTAGE_TIMEOUT
            raise DontCloseSpider
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
            self.spider_idle_start_time = int(time.time())
        if self.max_idle_time and now - self._idle_since >= self.max_idle_time:
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
        return scheduler is not None and scheduler.shared_work_pending()

    def _on_activity(self) -> None:
        self._idle_since = None

    def _start_polling(self) -> None:
        self._heartbeat = task.LoopingCall(self._beat)
        self._heartbeat.start(self._leases.timeout_ms / 3000, now=False)
        if self._poll_interval > 0:
            self._poller = task.LoopingCall(self._poll)
            self._poller.start(self._poll_interval, now=False)

    def _poll(self) -> None:
        if engine_accepts_requests(self.crawler):
            self._schedule_safely()

    def _stop_polling(self) -> None:
        self._report_filtered()
        for loop in (self._poller, self._heartbeat):
            if loop is not None and loop.running:
                loop.stop()
        try:
            self._leases.give_back([*self._leases.held])  # popped, never scheduled
        except OUTAGE_ERRORS:
            logger.error(
                "Redis is unreachable: %(count)d start messages this worker popped go back "
                "when their lease expires (SCHEDULER_WORKER_TIMEOUT)",
                {"count": len(self._leases.held)},
                extra={"spider": self},
            )

    def _beat(self) -> None:
        """Renew the leases of messages being turned into requests; recover dead ones."""
        guard = outage_guard(self.crawler)
        if not guard.may_try():
            return
        try:
            self._leases.renew()
            recovery = self._leases.recover_expired()
            if recovered := recovery.requeued:
                logger.info(
                    "Recovered %(count)d start messages leased by workers that stopped responding",
                    {"count": recovered},
                    extra={"spider": self},
                )
                self._inc("redis/start_messages/recovered", recovered)
            if dead := recovery.dead_lettered:
                logger.error(
                    "Moved %(count)d start messages to %(key)s: each was leased "
                    "%(max)d times by workers that stopped responding (SCHEDULER_MAX_DELIVERIES)",
                    {
                        "count": dead,
                        "key": self._leases.dead_letters_key,
                        "max": self._leases.max_deliveries,
                    },
                    extra={"spider": self},
                )
                self._inc("redis/start_messages/dead_lettered", dead)
        except OUTAGE_ERRORS as exc:
            guard.failed(exc)
        except Exception:  # a missed heartbeat must not kill the loop
            logger.warning("Start-message heartbeat failed", exc_info=True, extra={"spider": self})

    def _inc(self, key: str, count: int = 1) -> None:
        stats = getattr(self.crawler, "stats", None)
        if stats is not None:
            stats.inc_value(key, count)


class RedisSpider(RedisMixin, Spider):
    """Spider that reads its start requests from ``redis_key``."""


class RedisCrawlSpider(RedisMixin, CrawlSpider):
    """CrawlSpider that reads its start requests from ``redis_key``."""
