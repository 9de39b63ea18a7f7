"""Shared test helpers: spiders and crawlers built the way Scrapy builds them."""

from __future__ import annotations

from typing import Any

from scrapy import Spider
from scrapy.utils.test import get_crawler


class DemoSpider(Spider):
    name = "demo"

    def parse(self, response):  # pragma: no cover - never downloaded in unit tests
        return None

    def parse_item(self, response):  # pragma: no cover
        return None

    def on_error(self, failure):  # pragma: no cover
        return None


def make_spider(
    settings: dict[str, Any] | None = None, spidercls: type[Spider] = DemoSpider, **kwargs: Any
) -> Spider:
    """A spider bound to a fresh crawler configured by ``settings``."""
    crawler = get_crawler(spidercls, settings or {})
    spider = crawler._create_spider(**kwargs)
    crawler.spider = spider
    return spider
