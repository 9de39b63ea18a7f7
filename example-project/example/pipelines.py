"""Item pipelines of the example project.

See https://docs.scrapy.org/en/latest/topics/item-pipeline.html
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler


class ExamplePipeline:
    """Stamps every item with when (UTC) and by which spider it was crawled."""

    def __init__(self, crawler: Crawler | None = None) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ExamplePipeline:
        return cls(crawler)

    def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        # Scrapy 2.14+ no longer passes ``spider``; the crawler knows it.
        spider = spider or (self.crawler.spider if self.crawler is not None else None)
        item["crawled"] = datetime.now(timezone.utc)
        item["spider"] = spider.name if spider is not None else None
        return item
