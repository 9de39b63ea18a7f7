"""A RedisSpider crawling the sites of tests/polite_site.py (see test_politeness_e2e.py).

Run with ``scrapy runspider``: start URLs from ``polite:start_urls``, every link
followed (each site links to its own pages only). With ``-s POLITE_STARTS_LOG=<file>``,
each report of a start to Redis (``SlotQueue.started``) appends a line
``<time.time() just before the call> <slot>`` to the file. With ``-s POLITE_BUSY=<s>``,
a downloader middleware (the last before the downloader) blocks the reactor that long
for each request: a busy worker, slow between the pop and the send. With ``-s
POLITE_STALL=<s>:<path>``, a downloader middleware (the last) blocks the reactor ``<s>``
seconds on the first request of ``<path>`` (a worker stalled once, between the pop and
the send of that request).
"""

from __future__ import annotations

import time
from typing import Any

from scrapy_redis.politeness.queue import SlotQueue
from scrapy_redis.spiders import RedisSpider


def log_starts(path: str) -> None:
    """Every report of a start, when sent, appended to ``path``."""
    report = SlotQueue.started

    def started(queue: SlotQueue, slot: str, request_id: str | None = None) -> float:
        with open(path, "a") as log:
            log.write(f"{time.time():.6f} {slot}\n")
        return report(queue, slot, request_id)

    SlotQueue.started = started  # type: ignore[method-assign]


class BusyMiddleware:
    """Blocks the reactor for POLITE_BUSY seconds per request (a busy worker)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    @classmethod
    def from_crawler(cls, crawler: Any) -> BusyMiddleware:
        return cls(crawler.settings.getfloat("POLITE_BUSY"))

    def process_request(self, request: Any, spider: Any = None) -> None:
        time.sleep(self.seconds)


class StallMiddleware:
    """Blocks the reactor once, on the first request of one path (POLITE_STALL)."""

    def __init__(self, seconds: float, path: str) -> None:
        self.seconds, self.path = seconds, path

    @classmethod
    def from_crawler(cls, crawler: Any) -> StallMiddleware:
        seconds, _, path = crawler.settings.get("POLITE_STALL").partition(":")
        return cls(float(seconds), path)

    def process_request(self, request: Any, spider: Any = None) -> None:
        if self.path and request.url.endswith(self.path):
            self.path = ""
            time.sleep(self.seconds)


class PoliteSpider(RedisSpider):
    name = "polite"
    redis_key = "polite:start_urls"
    custom_settings = {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        "SCHEDULER_PERSIST": False,
        "MAX_IDLE_TIME_BEFORE_CLOSE": 8,  # (all four join before the start URLs come)
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "LOG_LEVEL": "INFO",
    }

    @classmethod
    def update_settings(cls, settings: Any) -> None:
        super().update_settings(settings)
        if settings.getfloat("POLITE_BUSY"):
            middlewares = {**settings.getdict("DOWNLOADER_MIDDLEWARES"), BusyMiddleware: 999}
            settings.set("DOWNLOADER_MIDDLEWARES", middlewares, priority="spider")
        if settings.get("POLITE_STALL"):
            middlewares = {**settings.getdict("DOWNLOADER_MIDDLEWARES"), StallMiddleware: 998}
            settings.set("DOWNLOADER_MIDDLEWARES", middlewares, priority="spider")

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> PoliteSpider:
        path = crawler.settings.get("POLITE_STARTS_LOG")
        if path:
            log_starts(path)
        return super().from_crawler(crawler, *args, **kwargs)

    def parse(self, response: Any, **kwargs: Any) -> Any:
        yield from response.follow_all(css="a")
