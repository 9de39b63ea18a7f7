"""What ``scrapy redis status`` says about politeness (a rule of
:mod:`scrapy_redis.diagnosis`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy_redis.crawl_keys import CrawlKeys
    from scrapy_redis.status import CrawlStatus


def shared_delay(status: CrawlStatus, keys: CrawlKeys) -> str | None:
    """Several workers apply DOWNLOAD_DELAY each to their own downloads (fleet-wide
    limits off): a site they all crawl sees up to that many times the configured rate."""
    workers = status.workers_alive
    delay = keys.download_delay
    if keys.fleet_limits or delay <= 0 or workers < 2:
        return None
    return (
        f"{workers} workers each apply DOWNLOAD_DELAY = {delay:g} to their own downloads: a "
        f"site they all crawl sees up to {workers} times the configured rate "
        f"({workers / delay:.3g} requests a second instead of {1 / delay:.3g}). Set "
        "SCHEDULER_FLEET_LIMITS = True to hold it for the whole fleet."
    )
