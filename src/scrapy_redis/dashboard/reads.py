"""One read of the crawls' status at a time, shared by every viewer and by ``/metrics``.

A read of a big crawl can take seconds and much memory; several tabs and a Prometheus
scraping at once must not start one each. :class:`SharedRead` starts a read (in the
reactor's thread pool) only when none is in flight and the last one is older than
``max_age`` seconds; every request meanwhile gets the read in flight, or the last one,
with its age. A read that failed is shared the same way (its error is the answer).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from twisted.internet.defer import Deferred, succeed
from twisted.internet.threads import deferToThreadPool

if TYPE_CHECKING:
    from collections.abc import Callable

    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    """One read: its result (None if it failed) or its error, its number (the first
    read is 1), when it finished (``clock`` seconds) and how long it took."""

    data: dict[str, Any] | None
    error: str | None
    number: int
    finished: float
    took: float


def describe_error(error: BaseException | None) -> str:
    """One line saying why a read failed."""
    if isinstance(error, RedisError):
        return f"Redis: {error}"
    return f"{type(error).__name__}: {error}"


class SharedRead:
    """Reads ``read()`` in ``reactor``'s thread pool, at most one at a time."""

    def __init__(
        self,
        read: Callable[[], dict[str, Any]],
        reactor: Any,
        max_age: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read, self.reactor, self.max_age, self.clock = read, reactor, max_age, clock
        #: Reads started so far.
        self.started = 0
        self.last: Snapshot | None = None
        self._waiting: list[Deferred[Snapshot]] | None = None
        #: Waiting for the read after the one in flight (begun before a change).
        self._next: list[Deferred[Snapshot]] = []
        self._stale = False

    def get(self) -> Deferred[Snapshot]:
        """The last read if younger than ``max_age``, else the next one to finish."""
        last = self.last
        if last is not None and self._waiting is None and not self._stale and self._fresh(last):
            return succeed(last)
        waiter: Deferred[Snapshot] = Deferred()
        if self._waiting is None:
            self._start()
        elif self._stale:  # the read in flight began before the change
            self._next.append(waiter)
            return waiter
        assert self._waiting is not None
        self._waiting.append(waiter)
        return waiter

    def _fresh(self, snapshot: Snapshot) -> bool:
        return self.clock() - snapshot.finished < self.max_age

    def changed(self) -> None:
        """The crawls changed (an action): the next answer comes from a read begun now."""
        self._stale = True

    def age(self, snapshot: Snapshot) -> float:
        """Seconds since ``snapshot`` was read."""
        return max(0.0, self.clock() - snapshot.finished)

    def _start(self) -> None:
        self._waiting, self._stale = [], False
        self.started += 1
        number, began = self.started, self.clock()
        work = deferToThreadPool(self.reactor, self.reactor.getThreadPool(), self.read)
        work.addCallbacks(
            lambda data: self._done(Snapshot(data, None, number, self.clock(), 0.0), began),
            lambda failure: self._done(self._failed(failure, number), began),
        )

    def _failed(self, failure: Failure, number: int) -> Snapshot:
        error = describe_error(failure.value)
        logger.error("cannot read the crawls: %s", error)
        if not isinstance(failure.value, RedisError):
            logger.debug("the read failed: %s", failure.getTraceback())
        return Snapshot(None, error, number, self.clock(), 0.0)

    def _done(self, snapshot: Snapshot, began: float) -> None:
        self.last = replace(snapshot, took=snapshot.finished - began)
        waiting, self._waiting = self._waiting or [], None
        if self._next:
            self._start()
            self._waiting, self._next = self._next, []
        for waiter in waiting:
            waiter.callback(self.last)
