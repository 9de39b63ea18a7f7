"""The end-to-end benchmark's spider: follow every link of the benchmark site.

A plain ``scrapy.Spider`` that works unchanged with the original scrapy-redis,
with ours and with Scrapy's own scheduler: run.py picks the scheduler with
``-s SCHEDULER=...``. Run as::

    python -m scrapy runspider benchmarks/bench_spider.py \
        -a start_url=http://127.0.0.1:PORT/catalog/... -a report=/tmp/worker1.json \
        -s SCHEDULER=scrapy_redis.scheduler.Scheduler \
        -s DUPEFILTER_CLASS=scrapy_redis.dupefilter.RFPDupeFilter \
        -s REDIS_URL=redis://127.0.0.1:PORT/0 -s SCHEDULER_PERSIST=True

On close it writes ``report`` (JSON): Scrapy's stats, the time it opened, the
time of its first and last response, and the close reason.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import scrapy


class FollowSpider(scrapy.Spider):
    name = "bench"
    custom_settings = {
        "LOG_LEVEL": "INFO",
        "CONCURRENT_REQUESTS": 16,
        # Scrapy's default per-domain limit (8) would cap a one-host crawl below 16.
        "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
    }

    def __init__(
        self, start_url: str = "", report: str = "", items: str = "", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start_url]
        #: ``-a items=1``: one item per page (for an item pipeline to store).
        self.items = bool(items)
        self.report = report
        self.opened_at = time.time()
        self.first_response: float | None = None
        self.last_response: float | None = None

    def parse(self, response: Any) -> Any:
        now = time.time()
        if self.first_response is None:
            self.first_response = now
        self.last_response = now
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href)
        if self.items:
            yield {"url": response.url, "title": response.css("title::text").get()}

    def closed(self, reason: str) -> None:
        if not self.report:
            return
        stats = {
            key: (value if isinstance(value, (int, float, str)) else str(value))
            for key, value in self.crawler.stats.get_stats().items()
        }
        package = sys.modules.get("scrapy_redis")
        with open(self.report, "w") as f:
            json.dump(
                {
                    "reason": reason,
                    "opened_at": self.opened_at,
                    "first_response": self.first_response,
                    "last_response": self.last_response,
                    "closed_at": time.time(),
                    "stats": stats,
                    "scrapy_redis": getattr(package, "__file__", None),
                    "scrapy_redis_version": getattr(package, "__version__", None),
                },
                f,
                indent=1,
            )
