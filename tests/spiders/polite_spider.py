"""A RedisSpider crawling the sites of tests/polite_site.py (see test_politeness_e2e.py).

Run with ``scrapy runspider``: start URLs from ``polite:start_urls``, every link
followed (each site links to its own pages only).
"""

from __future__ import annotations

from typing import Any

from scrapy_redis.spiders import RedisSpider


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

    def parse(self, response: Any, **kwargs: Any) -> Any:
        yield from response.follow_all(css="a")
