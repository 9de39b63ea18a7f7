"""Start requests dropped by the duplicate filter: counted, and logged once per batch.

With REDIS_START_URLS_DONT_FILTER = False a start request may meet the
duplicate filter. The spider watches the requests it made from start messages
(:meth:`FilteredStartRequests.watch`); each one the scheduler drops
(``request_dropped``) is counted in ``redis/start_requests/filtered``, and the
number is logged at INFO once the whole batch has met the filter.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any
from weakref import WeakSet

from scrapy import Request

logger = logging.getLogger("scrapy_redis.spiders")


class FilteredStartRequests:
    """The start requests the filter may drop, and how many it dropped since the last log."""

    def __init__(self, count: Callable[[str, int], None], spider: Any = None) -> None:
        self.count = count
        self.spider = spider  # named in log records
        self.watched = WeakSet[Request]()
        #: Dropped since the last :meth:`report`.
        self.filtered = 0

    def watch(self, requests: Iterable[Request]) -> None:
        """Count these requests if the filter drops them (those it may drop)."""
        self.watched.update(request for request in requests if not request.dont_filter)

    def dropped(self, request: Request) -> None:
        """The ``request_dropped`` handler."""
        if request in self.watched:
            self.watched.discard(request)
            self.filtered += 1
            self.count("redis/start_requests/filtered", 1)

    def report(self) -> None:
        """Log how many were dropped since the last report, if any."""
        if self.filtered:
            logger.info(
                "Start requests filtered as duplicates of requests seen before: %(count)d "
                "(see REDIS_START_URLS_DONT_FILTER)",
                {"count": self.filtered},
                extra={"spider": self.spider},
            )
            self.filtered = 0
