"""A CrawlSpider whose start URLs are pushed to Redis (``mycrawler:start_urls``).

Run any number of workers::

    scrapy crawl mycrawler_redis -a domain=127.0.0.1

then feed them::

    redis-cli lpush mycrawler:start_urls http://127.0.0.1:8000/

``-s MAX_IDLE_TIME_BEFORE_CLOSE=10`` makes them stop after 10 idle seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import Rule

from example.spiders.myspider_redis import domains
from scrapy_redis.spiders import RedisCrawlSpider

if TYPE_CHECKING:
    from scrapy.http import Response


class MyCrawler(RedisCrawlSpider):
    """CrawlSpider that reads URLs from the Redis list ``mycrawler:start_urls``.

    ``-a domain=a.com,b.org`` keeps the crawl on those domains (default: anywhere).
    """

    name = "mycrawler_redis"
    redis_key = "mycrawler:start_urls"

    rules = (
        # Follow every link, and make an item of every page.
        Rule(LinkExtractor(), callback="parse_page", follow=True),
    )

    def __init__(self, *args: Any, domain: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allowed_domains = domains(domain)

    def parse_page(self, response: Response) -> dict[str, Any]:
        return {"name": response.css("title::text").get(), "url": response.url}
