"""A RedisSpider whose requests leave Scrapy every way there is (see test_reliability_e2e.py).

Run with ``scrapy runspider``: errbacks, exceptions in callbacks (after some
output), IgnoreRequest from a downloader middleware, offsite links, redirects,
retries, 404s and 500s.
"""

from __future__ import annotations

import re
from typing import Any

from scrapy import Request
from scrapy.exceptions import IgnoreRequest

from scrapy_redis.spiders import RedisSpider

PAGE = re.compile(r"/p/(\d+)\.html$")


def page_number(url: str) -> int | None:
    match = PAGE.search(url)
    return int(match.group(1)) if match else None


class IgnoreSomePages:
    """Downloader middleware: drops every 11th page with IgnoreRequest."""

    def process_request(self, request: Request, spider: Any = None) -> None:
        number = page_number(request.url)
        if number is not None and number % 11 == 10:
            raise IgnoreRequest(f"ignored {request.url}")


class ResidueSpider(RedisSpider):
    name = "residue"
    redis_key = "residue:start_urls"
    allowed_domains = ["127.0.0.1"]
    custom_settings = {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        "SCHEDULER_PERSIST": True,
        "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
        "DOWNLOADER_MIDDLEWARES": {"residue_spider.IgnoreSomePages": 543},
        "TELNETCONSOLE_ENABLED": False,
    }

    def parse(self, response: Any, **kwargs: Any) -> Any:
        number = page_number(response.url) or 0
        for href in response.css("a::attr(href)").getall():
            if number % 3 == 0:
                yield response.follow(href, errback=self.on_error)
            else:
                yield response.follow(href)
        yield Request("http://offsite.invalid/away")  # filtered by the offsite middleware
        yield {"url": response.url}
        if number % 5 == 4:
            raise ValueError(f"callback failure on {response.url}")

    def on_error(self, failure: Any) -> None:
        self.crawler.stats.inc_value("residue/errbacks")
