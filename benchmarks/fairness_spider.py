"""The fairness benchmark's spider (benchmarks/fairness.py): a RedisSpider that takes its
start URLs from the ``fairness:start_urls`` list and follows every link.

Works unchanged with the original scrapy-redis 0.9.1 and with ours; the scheduler and
every limit come from ``-s`` options. On close it writes ``-a report=FILE`` (JSON:
Scrapy's stats, the close reason, the scrapy_redis module imported).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from scrapy_redis.spiders import RedisSpider


class FairnessSpider(RedisSpider):
    name = "fairness"
    redis_key = "fairness:start_urls"

    def __init__(self, report: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.report = report

    def parse(self, response: Any, **kwargs: Any) -> Any:
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href)

    def closed(self, reason: str) -> None:
        if not self.report:
            return
        stats = {
            key: value if isinstance(value, (int, float, str)) else str(value)
            for key, value in self.crawler.stats.get_stats().items()
        }
        package = sys.modules.get("scrapy_redis")
        with open(self.report, "w") as f:
            json.dump(
                {
                    "reason": reason,
                    "stats": stats,
                    "scrapy_redis": getattr(package, "__file__", None),
                },
                f,
                indent=1,
            )
