"""When this worker finds no request: the grace period, and waking the engine on news.

Scrapy asks the scheduler for requests when a download ends or every 5 s, and
closes the spider when the scheduler has nothing pending. An :class:`IdleWatch`
says whether this worker still waits (SCHEDULER_IDLE_BEFORE_CLOSE, a grace
period after the queue was first found empty) and, while it idles, watches the
queue (:class:`~scrapy_redis.scheduling.wakeup.QueueWatcher`, prompted by the news channel's
:class:`~scrapy_redis.scheduling.wakeup.NewsListener`) to wake the engine as soon as there is
something to pop, or the other workers released their last leases (time to close).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from scrapy_redis.scheduling.sharded_news import ShardedNewsListener
from scrapy_redis.scheduling.wakeup import NewsChannel, NewsListener, QueueWatcher

if TYPE_CHECKING:
    from scrapy_redis.store.guarded import RedisCalls


class SharedQueueView(Protocol):
    """What the watch asks of the request feed."""

    def has_requests(self) -> bool: ...

    def others_hold_leases(self) -> bool: ...


class IdleWatch:
    """The idle side of one scheduler: grace period and wake-ups.

    Until :meth:`attach` (a scheduler whose ``open()`` is a subclass's own), it only
    keeps the grace period.
    """

    def __init__(
        self, idle_before_close: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.idle_before_close = idle_before_close
        self.clock = clock
        #: When the queue was first found empty (None: not idle).
        self.empty_since: float | None = None
        self.watcher: QueueWatcher | None = None
        self.listener: NewsListener | ShardedNewsListener | None = None
        self._feed: SharedQueueView | None = None
        self._others_leased = False

    def attach(
        self,
        feed: SharedQueueView,
        calls: RedisCalls,
        wake: Callable[[], None],
        news: NewsChannel,
        reactor: Any = None,
    ) -> None:
        """Watch ``feed`` while idle (through ``calls``), prompted by ``news``; ``wake``
        the engine when there is something to do."""
        self._feed = feed
        self.watcher = QueueWatcher(
            lambda: calls.call(self._has_news, False),
            wake,
            clock=reactor,
            on_start=lambda: calls.call(self._take_baseline, None),
        )
        # A thread: it hands the news to Twisted's reactor, or to ``reactor`` if it takes
        # calls from other threads (a test's task.Clock, which runs the watcher, does
        # not). On a Redis Cluster a thread per master, for the lanes' sharded channels.
        notify, hands = self.watcher.notify, _takes_calls_from_threads(reactor)
        if news.sharded:
            self.listener = ShardedNewsListener(news.server, news.listened, notify, hands)
        else:
            self.listener = NewsListener(news.server, news.name, notify, hands)

    def found_empty(self) -> None:
        """The feed had nothing to hand out: start the grace period and watching."""
        if self.empty_since is None:
            self.empty_since = self.clock()
        if self.listener is not None:
            self.listener.start()
        if self.watcher is not None:
            self.watcher.watch()

    def found_work(self) -> None:
        if self.empty_since is None:  # not idle (watching starts with found_empty())
            return
        self.empty_since = None
        if self.watcher is not None:
            self.watcher.stop()

    def waiting_before_close(self) -> bool:
        """Whether the grace period (SCHEDULER_IDLE_BEFORE_CLOSE) is still running."""
        if self.idle_before_close <= 0:
            return False
        if self.empty_since is None:
            self.empty_since = self.clock()
        return self.clock() - self.empty_since < self.idle_before_close

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        if self.listener is not None:
            self.listener.stop()

    def _take_baseline(self) -> None:
        assert self._feed is not None
        self._others_leased = self._feed.others_hold_leases()

    def _has_news(self) -> bool:
        """Requests to pop, or the other workers' leases all released (time to idle)."""
        assert self._feed is not None
        if self._feed.has_requests():
            return True
        return self._others_leased and not self._feed.others_hold_leases()


def _takes_calls_from_threads(reactor: Any) -> Any:
    """``reactor`` if it has Twisted's ``callFromThread``, else None (the installed one)."""
    return reactor if callable(getattr(reactor, "callFromThread", None)) else None
