"""A plain Scrapy CrawlSpider that shares its queue through the Redis scheduler.

Nothing in the spider is Redis-specific: the project's settings
(SCHEDULER, DUPEFILTER_CLASS, ITEM_PIPELINES) make every ``scrapy crawl dmoz``
process take requests from, and add them to, the same queue in Redis, skip
the URLs any of them already scheduled, and push their items to ``dmoz:items``.
Start more processes to crawl faster; stop them and start again to resume
(SCHEDULER_PERSIST = True).

The start URL is the demo site (``python demo_site.py``): the spider argument
``-a start_url=URL``, else the environment variable DEMO_SITE_URL, else
http://127.0.0.1:8000/. Each process fetches it once (Scrapy does not filter
start URLs); the rest of the site is fetched once in all.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule

from example.items import ExampleItem, ExampleLoader

if TYPE_CHECKING:
    from scrapy.http import TextResponse

DEFAULT_START_URL = "http://127.0.0.1:8000/"


class DmozSpider(CrawlSpider):
    """Follows the links of the demo site; one item per page."""

    name = "dmoz"
    rules = [
        Rule(LinkExtractor(restrict_css=(".links",)), callback="parse_directory", follow=True),
    ]

    def __init__(self, *args: Any, start_url: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        url = start_url or os.environ.get("DEMO_SITE_URL") or DEFAULT_START_URL
        self.start_urls = [url]
        self.allowed_domains = [urlsplit(url).hostname or ""]

    def parse_directory(self, response: TextResponse) -> ExampleItem:
        loader = ExampleLoader(response=response)
        loader.add_css("name", "title::text")
        loader.add_css("description", ".description::text")
        loader.add_value("url", response.url)
        item: ExampleItem = loader.load_item()
        return item
