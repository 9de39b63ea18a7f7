"""Waking Scrapy's engine when the shared queue gets requests while this worker idles."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from scrapy_redis._engine import installed_reactor

logger = logging.getLogger(__name__)


class QueueWatcher:
    """While this worker idles, checks for news with a growing interval and wakes the engine.

    Scrapy asks the scheduler for requests when a download ends or every 5 s;
    requests another worker pushes meanwhile, or the end of the other workers'
    work (time to close), would wait for that. The watcher calls ``has_news``
    after 0.1 s, then doubling up to 2 s, and ``wake`` as soon as it says True.
    ``on_start`` runs when watching starts (to take a baseline).
    """

    FIRST, LAST = 0.1, 2.0

    def __init__(
        self,
        has_news: Callable[[], bool],
        wake: Callable[[], None],
        clock: Any = None,
        on_start: Callable[[], None] | None = None,
    ) -> None:
        self.has_news = has_news
        self.wake = wake
        self.on_start = on_start
        self.clock = clock
        self.interval = self.FIRST
        self._call: Any = None

    def watch(self) -> None:
        if self._call is None:
            if self.on_start is not None and self.interval == self.FIRST:
                self.on_start()
            if self.clock is None:
                self.clock = installed_reactor()
            self._call = self.clock.callLater(self.interval, self._check)

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self.interval = self.FIRST

    def _check(self) -> None:
        self._call = None
        try:
            news = self.has_news()
        except Exception:  # look again later
            logger.debug("Queue check failed", exc_info=True)
            news = False
        if news:
            self.stop()
            self.wake()
            return
        self.interval = min(self.interval * 2, self.LAST)
        self.watch()
