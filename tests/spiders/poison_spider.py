"""A RedisSpider that kills its own process on one page (see test_scheduler_safety.py).

Run with ``scrapy runspider``: every page is followed and scraped, except
``/p/<POISON>.html``, whose callback ends the process at once, as an
out-of-memory kill or a crash in a C extension would.
"""

from __future__ import annotations

import os
from typing import Any

from scrapy_redis.spiders import RedisSpider

POISON = "/p/7.html"


class PoisonSpider(RedisSpider):
    name = "poison"
    redis_key = "poison:start_urls"
    custom_settings = {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        "ITEM_PIPELINES": {"scrapy_redis.pipelines.RedisPipeline": 300},
        "SCHEDULER_PERSIST": True,
        "SCHEDULER_WORKER_TIMEOUT": 1,
        "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
        "TELNETCONSOLE_ENABLED": False,
    }

    def parse(self, response: Any, **kwargs: Any) -> Any:
        if response.url.endswith(POISON):
            os._exit(3)
        yield from response.follow_all(css="a")
        yield {"url": response.url}
