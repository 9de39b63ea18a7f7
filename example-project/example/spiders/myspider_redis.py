"""A spider whose start URLs are pushed to Redis (``myspider:start_urls``).

Run any number of workers::

    scrapy crawl myspider_redis -a domain=127.0.0.1

then feed them (a URL, or a JSON object such as ``{"url": "...", "meta": {...}}``)::

    redis-cli lpush myspider:start_urls http://127.0.0.1:8000/

The workers wait for more URLs when done; add
``-s MAX_IDLE_TIME_BEFORE_CLOSE=10`` to make them stop after 10 idle seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from scrapy.http import TextResponse

from scrapy_redis.spiders import RedisSpider

if TYPE_CHECKING:
    from scrapy.http import Response


def domains(value: str) -> list[str]:
    """``"a.com, b.org"`` as ``["a.com", "b.org"]``."""
    return [domain.strip() for domain in value.split(",") if domain.strip()]


class MySpider(RedisSpider):
    """Spider that reads URLs from the Redis list ``myspider:start_urls``.

    ``-a domain=a.com,b.org`` keeps the crawl on those domains (default: anywhere).
    """

    name = "myspider_redis"
    redis_key = "myspider:start_urls"

    def __init__(self, *args: Any, domain: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allowed_domains = domains(domain)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        if not isinstance(response, TextResponse):  # an image, a PDF...: no title, no links
            return
        yield {"name": response.css("title::text").get(), "url": response.url}
        yield from response.follow_all(css="a")
