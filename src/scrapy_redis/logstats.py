"""Scrapy's periodic "Crawled N pages" line, for this worker and for the fleet.

With :class:`~scrapy_redis.stats.RedisStatsCollector`, Scrapy's own
``LogStats`` reads ``get_value()``, the fleet's totals: its line shows the
fleet's pages and rate (and the first line of a worker joining a running crawl
shows the fleet's whole count as a rate). This extension logs this worker's
numbers first, then the fleet's, each with its own rate::

    Crawled 120 pages (at 60 pages/min), scraped 100 items (at 50 items/min);
    fleet: 1020 pages (at 240 pages/min), 900 items (at 200 items/min)

Enable it in place of Scrapy's (see docs/stats.rst)::

    EXTENSIONS = {
        "scrapy.extensions.logstats.LogStats": None,
        "scrapy_redis.logstats.LogStats": 0,
    }

With another stats collector it logs as Scrapy's does (no fleet part).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from twisted.internet import task

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from typing_extensions import Self

logger = logging.getLogger(__name__)

_PAGES, _ITEMS = "response_received_count", "item_scraped_count"
_WORKER = (
    "Crawled %(pages)d pages (at %(pagerate)d pages/min), "
    "scraped %(items)d items (at %(itemrate)d items/min)"
)
_FLEET = (
    "; fleet: %(fleet_pages)d pages (at %(fleet_pagerate)d pages/min), "
    "%(fleet_items)d items (at %(fleet_itemrate)d items/min)"
)


class LogStats:
    """Log this worker's and the fleet's pages and items every LOGSTATS_INTERVAL seconds.

    ``clock`` is what the timer runs on (a ``task.Clock`` in tests); by default the
    reactor.
    """

    def __init__(self, stats: Any, interval: float = 60.0, clock: Any = None) -> None:
        self.stats = stats
        self.interval = interval
        self.multiplier = 60.0 / interval
        self.task = task.LoopingCall(self.log)
        if clock is not None:
            self.task.clock = clock
        self.spider: Spider | None = None
        self._worker_before = (0, 0)
        self._fleet_before = (0, 0)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        interval = crawler.settings.getfloat("LOGSTATS_INTERVAL")
        if not interval:
            raise NotConfigured
        extension = cls(crawler.stats, interval)
        crawler.signals.connect(extension.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        return extension

    def _fleet(self) -> bool:
        return hasattr(self.stats, "get_worker_value")

    def _counts(self, get: Any) -> tuple[int, int]:
        return get(_PAGES, 0) or 0, get(_ITEMS, 0) or 0

    def _worker_counts(self) -> tuple[int, int]:
        get = self.stats.get_worker_value if self._fleet() else self.stats.get_value
        return self._counts(get)

    def spider_opened(self, spider: Spider) -> None:
        self.spider = spider
        self._worker_before = self._worker_counts()
        # The fleet's counts so far: its first rate is of the first interval only.
        self._fleet_before = self._counts(self.stats.get_value) if self._fleet() else (0, 0)
        self.task.start(self.interval, now=True)

    def log(self) -> None:
        worker = self._worker_counts()
        args = self._line_args("", worker, self._worker_before)
        self._worker_before = worker
        message = _WORKER
        if self._fleet():
            fleet = self._counts(self.stats.get_value)
            args.update(self._line_args("fleet_", fleet, self._fleet_before))
            self._fleet_before = fleet
            message += _FLEET
        logger.info(message, args, extra={"spider": self.spider})

    def _line_args(
        self, prefix: str, counts: tuple[int, int], before: tuple[int, int]
    ) -> dict[str, float]:
        (pages, items), (pages_before, items_before) = counts, before
        return {
            f"{prefix}pages": pages,
            f"{prefix}pagerate": (pages - pages_before) * self.multiplier,
            f"{prefix}items": items,
            f"{prefix}itemrate": (items - items_before) * self.multiplier,
        }

    def spider_closed(self, spider: Spider, reason: str) -> None:
        """Stop logging; set ``responses_per_minute`` and ``items_per_minute`` as Scrapy's
        LogStats does, from this worker's own counts and times."""
        if self.task.running:
            self.task.stop()
        get = self.stats.get_worker_value if self._fleet() else self.stats.get_value
        start, finish = get("start_time"), get("finish_time")
        if not start or not finish:
            return
        minutes = (finish - start).total_seconds() / 60
        if minutes > 0:
            pages, items = self._counts(get)
            self.stats.set_value("responses_per_minute", pages / minutes)
            self.stats.set_value("items_per_minute", items / minutes)
