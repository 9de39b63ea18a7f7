"""A RedisSpider crawled as under a future Scrapy whose engine has no ``slot.inprogress``
(see test_future_scrapy_e2e.py).

Run with ``scrapy runspider``. Importing it sets scrapy-redis's seam
``_engine.IN_PROGRESS_ATTRIBUTE`` to a name Scrapy's engine lacks. Each callback
records the highest ``scheduler/leases/acked`` seen so far as
``future/acked_during_crawl``: leases released while the crawl runs, not at close.
"""

from __future__ import annotations

from typing import Any

from scrapy_redis.core import engine as _engine
from scrapy_redis.spiders import RedisSpider

_engine.IN_PROGRESS_ATTRIBUTE = "inprogress_of_a_future_scrapy"


class FutureEngineSpider(RedisSpider):
    name = "future_engine"
    redis_key = "future_engine:start_urls"
    allowed_domains = ["127.0.0.1"]
    custom_settings = {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        "SCHEDULER_PERSIST": False,
        "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
        "TELNETCONSOLE_ENABLED": False,
    }

    def parse(self, response: Any, **kwargs: Any) -> Any:
        stats = self.crawler.stats
        acked = stats.get_value("scheduler/leases/acked", 0)
        stats.max_value("future/acked_during_crawl", acked)
        yield {"url": response.url}
        yield from response.follow_all(css="a")
