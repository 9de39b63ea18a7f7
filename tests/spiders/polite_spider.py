"""A RedisSpider crawling the sites of tests/polite_site.py (see test_politeness_e2e.py).

Run with ``scrapy runspider``: start URLs from ``polite:start_urls``, every link
followed (each site links to its own pages only). With ``-s POLITE_STARTS_LOG=<file>``,
each report of a start to Redis (``SlotQueue.started``) appends a line
``<time.time() just before the call> <slot>`` to the file. With ``-s POLITE_BUSY=<s>``,
a downloader middleware (the last before the downloader) blocks the reactor that long
for each request: a busy worker, slow between the pop and the send. With ``-s
POLITE_STALL=<s>:<path>``, a downloader middleware (the last) blocks the reactor ``<s>``
seconds on the first request of ``<path>`` (a worker stalled once, between the pop and
the send of that request). With ``-s POLITE_OUTSIDE=files``, each page ``/p/<n>.html``
yields an item with ``file_urls`` ``/f/<n>.bin`` of its site (Scrapy's FilesPipeline,
into FILES_STORE); with ``-s POLITE_OUTSIDE=download``, the callback of each page
downloads that file itself (``engine.download_async()``): downloads that bypass the
scheduler.
"""

from __future__ import annotations

import time
from typing import Any

from scrapy import Request
from scrapy.utils.defer import maybe_deferred_to_future

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
        if settings.get("POLITE_OUTSIDE") == "files":
            pipelines = {**settings.getdict("ITEM_PIPELINES"), FILES_PIPELINE: 1}
            settings.set("ITEM_PIPELINES", pipelines, priority="spider")

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> PoliteSpider:
        path = crawler.settings.get("POLITE_STARTS_LOG")
        if path:
            log_starts(path)
        return super().from_crawler(crawler, *args, **kwargs)

    def parse(self, response: Any, **kwargs: Any) -> Any:
        outside = self.settings.get("POLITE_OUTSIDE")
        if outside == "files" and "/p/" in response.url:
            yield {"file_urls": [file_url(response)]}
        callback = self.parse_fetching if outside == "download" else None
        yield from response.follow_all(css="a", callback=callback)

    async def parse_fetching(self, response: Any, **kwargs: Any) -> Any:
        """POLITE_OUTSIDE=download: the page's file, downloaded by the engine itself."""
        engine = self.crawler.engine
        request = Request(file_url(response))
        download_async = getattr(engine, "download_async", None)  # Scrapy >= 2.14
        if download_async is not None:
            fetched = await download_async(request)
        else:
            fetched = await maybe_deferred_to_future(engine.download(request, self))
        yield {"file": fetched.url, "status": fetched.status}


FILES_PIPELINE = "scrapy.pipelines.files.FilesPipeline"


def file_url(response: Any) -> str:
    """The file of page ``/p/<n>.html``: ``/f/<n>.bin`` of its site."""
    name = response.url.rsplit("/", 1)[-1].replace(".html", ".bin")
    return str(response.urljoin(f"/f/{name}"))
