"""The scheduler's Redis calls: through the outage guard, and stopping the crawl when
it cannot go on (Redis unreachable too long, a key of another type, unreadable data).

Every part of the scheduler makes its Redis calls through one :class:`RedisCalls`:
while Redis is unreachable a call is not made (or fails) and gives its
``during_outage`` value instead, the work waits in memory, and the crawl is closed
after REDIS_OUTAGE_TIMEOUT. Once the crawl is stopping (:attr:`RedisCalls.halted`),
the parts write nothing more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from redis.exceptions import ResponseError

from scrapy_redis import defaults
from scrapy_redis.core.engine import engine_of
from scrapy_redis.core.exit_status import fail_running_command
from scrapy_redis.store.keytypes import KeyUse, describe, is_wrong_type, wrong_types
from scrapy_redis.store.outage import OutageGuard

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_redis.exceptions import UndecodableRequestError

logger = logging.getLogger("scrapy_redis.scheduler")  # the scheduler's parts log as the scheduler

T = TypeVar("T")


class RedisCalls:
    """Redis calls of one scheduler, and the stop of its crawl."""

    def __init__(
        self,
        server: Any,
        guard: OutageGuard,
        crawler: Crawler | None,
        spider: Any = None,
        key_uses: Callable[[], list[KeyUse]] = list,
    ) -> None:
        self.server = server
        self.guard = guard
        self.crawler = crawler
        self.spider = spider
        #: The keys the scheduler uses, to say which one has the wrong type.
        self.key_uses = key_uses
        #: Whether the crawl is stopping because of this scheduler (nothing more is written).
        self.halted = False

    def call(self, call: Callable[[], T], during_outage: T) -> T:
        """``call()``, or ``during_outage`` while Redis is unreachable (see outage.py) or
        after a key turned out to have another type (the crawl is then stopped)."""
        try:
            result = self.guard.attempt(call, during_outage)
        except ResponseError as exc:
            if not is_wrong_type(exc):
                raise
            self.wrong_type(exc)
            return during_outage
        if self.guard.since is not None:
            self._stop_if_expired()
        return result

    def _stop_if_expired(self) -> None:
        if self.guard.expired() and not self.halted:
            logger.error(
                "Redis has been unreachable for more than REDIS_OUTAGE_TIMEOUT (%(timeout)ss).",
                {"timeout": self.guard.timeout},
                extra={"spider": self.spider},
            )
            self.stop("redis_unavailable")

    def wrong_type(self, exc: ResponseError) -> None:
        """A key holds another type than ours: say which and how to fix it, once, and
        stop (nothing more is written; the shared data is kept)."""
        if self.halted:
            return
        try:
            wrong = wrong_types(self.server, self.key_uses())
        except Exception:  # only to word the message: Redis's own error will do
            wrong = []
        logger.error(
            "%(problem)s Closing the spider.",
            {"problem": describe(wrong) if wrong else exc},
            extra={"spider": self.spider},
        )
        self.stop("redis_wrong_type")

    def halt(self, exc: UndecodableRequestError) -> None:
        """Stop: the queue holds data this worker cannot read (left in place)."""
        logger.error("%(error)s Closing the spider.", {"error": exc}, extra={"spider": self.spider})
        self.stop("scheduler_serializer_error")

    def stop(self, reason: str) -> None:
        """Close the spider with ``reason`` (once the engine runs); write nothing more.
        ``scrapy crawl`` then exits with SCHEDULER_STOP_EXIT_CODE (see exit_status.py)."""
        self.halted = True
        engine = engine_of(self.crawler)
        if engine is None:
            return
        fail_running_command(exit_code(self.crawler))
        if hasattr(engine, "close_spider_async"):
            from scrapy.utils.defer import deferred_from_coro

            deferred_from_coro(engine.close_spider_async(reason=reason))
        else:  # Scrapy < 2.14
            engine.close_spider(self.spider, reason=reason)


def exit_code(crawler: Crawler | None) -> int:
    """SCHEDULER_STOP_EXIT_CODE of ``crawler`` (the default without one)."""
    if crawler is None:
        return int(defaults.SCHEDULER_STOP_EXIT_CODE)
    return crawler.settings.getint("SCHEDULER_STOP_EXIT_CODE", defaults.SCHEDULER_STOP_EXIT_CODE)
