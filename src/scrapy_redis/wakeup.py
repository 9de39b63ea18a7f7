"""Waking Scrapy's engine when the shared queue gets requests while this worker idles."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class QueueWatcher:
    """While the queue looks empty, checks it with a growing interval and wakes the engine.

    Scrapy asks the scheduler for requests when a download ends or every 5 s;
    requests another worker pushes meanwhile would wait for that. The watcher
    checks (one ``EXISTS``) after 0.1 s, then doubling up to 2 s, and calls
    ``wake`` as soon as the queue holds something.
    """

    FIRST, LAST = 0.1, 2.0

    def __init__(
        self, is_empty: Callable[[], bool], wake: Callable[[], None], clock: Any = None
    ) -> None:
        self.is_empty = is_empty
        self.wake = wake
        self.clock = clock
        self.interval = self.FIRST
        self._call: Any = None

    def watch(self) -> None:
        if self._call is None:
            if self.clock is None:
                from twisted.internet import reactor  # not at import: Scrapy installs it

                self.clock = reactor
            self._call = self.clock.callLater(self.interval, self._check)

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self.interval = self.FIRST

    def _check(self) -> None:
        self._call = None
        try:
            empty = self.is_empty()
        except Exception:  # Redis unreachable: look again later
            logger.debug("Queue check failed", exc_info=True)
            empty = True
        if not empty:
            self.stop()
            self.wake()
            return
        self.interval = min(self.interval * 2, self.LAST)
        self.watch()
