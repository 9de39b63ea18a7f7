"""Surviving Redis outages: log once, back off, carry on when Redis is back.

One :class:`OutageGuard` per crawler (:func:`outage_guard`) is shared by the
scheduler, the spider, the pipeline and the stats collector. When a Redis call
fails with a connection error, the component keeps what it could not write in
memory and asks the guard; while Redis is down the guard says when to try
again (0.5 s, doubling up to 5 s), so a dead server costs the reactor one
failed call per back-off step, not one per request. The outage is logged once
when it starts and once when it ends. After REDIS_OUTAGE_TIMEOUT seconds the
scheduler closes the spider (reason ``redis_unavailable``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar
from weakref import WeakKeyDictionary

import redis
from redis.exceptions import ClusterDownError, MasterDownError, SlotNotCoveredError, TryAgainError

from scrapy_redis import defaults

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The errors that mean "Redis cannot be reached now", as opposed to a bad command: on a
#: Redis Cluster also those of a failover (a master lost, its slots not served yet, keys
#: being moved), which redis-py raises once its own retries are spent.
OUTAGE_ERRORS = (
    redis.ConnectionError,
    redis.TimeoutError,
    ConnectionError,
    TimeoutError,
    ClusterDownError,
    TryAgainError,
    MasterDownError,
    SlotNotCoveredError,
)

_guards: WeakKeyDictionary[Crawler, OutageGuard] = WeakKeyDictionary()


class OutageGuard:
    """The state of the connection to Redis, as seen by the components of one crawler."""

    FIRST_BACKOFF, MAX_BACKOFF = 0.5, 5.0

    def __init__(self, timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self.clock = clock
        self.since: float | None = None
        self._retry_at = 0.0
        self._backoff = self.FIRST_BACKOFF
        self._on_recovery: list[Callable[[], None]] = []

    def on_recovery(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when an outage ends (to write what was kept in memory)."""
        self._on_recovery.append(callback)

    @property
    def down(self) -> bool:
        return self.since is not None

    def may_try(self) -> bool:
        """Whether a Redis call is worth trying now (always, unless backing off)."""
        return self.since is None or self.clock() >= self._retry_at

    def failed(self, exc: BaseException) -> None:
        """Record a failed call; logs the start of an outage."""
        now = self.clock()
        started = self.since is None
        if started:
            self.since = now
        else:
            self._backoff = min(self._backoff * 2, self.MAX_BACKOFF)
        self._retry_at = now + self._backoff  # before logging: a log handler may call Redis
        if started:
            logger.warning(
                "Redis is unreachable (%(error)s); keeping work in memory and retrying for up "
                "to %(timeout)ss (REDIS_OUTAGE_TIMEOUT)",
                {"error": exc, "timeout": self.timeout},
            )

    def succeeded(self) -> None:
        """Record a successful call; logs the end of an outage."""
        if self.since is None:
            return
        logger.warning(
            "Redis is reachable again after %(seconds).1fs", {"seconds": self.clock() - self.since}
        )
        self.since = None
        self._backoff = self.FIRST_BACKOFF
        for callback in self._on_recovery:
            callback()

    def attempt(self, call: Callable[[], T], during_outage: T) -> T:
        """``call()``, or ``during_outage`` while backing off or when it fails to reach Redis."""
        if not self.may_try():
            return during_outage
        try:
            result = call()
        except OUTAGE_ERRORS as exc:
            self.failed(exc)
            return during_outage
        self.succeeded()
        return result

    def expired(self) -> bool:
        """Whether the current outage has lasted longer than REDIS_OUTAGE_TIMEOUT."""
        return self.since is not None and self.clock() - self.since > self.timeout


def outage_guard(crawler: Crawler) -> OutageGuard:
    """The guard shared by the components of ``crawler``."""
    guard = _guards.get(crawler)
    if guard is None:
        timeout = crawler.settings.getfloat("REDIS_OUTAGE_TIMEOUT", defaults.REDIS_OUTAGE_TIMEOUT)
        guard = _guards[crawler] = OutageGuard(timeout)
    return guard
