"""What scrapy-redis needs to know of Scrapy's engine, across Scrapy versions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


def _slot(engine: Any) -> Any:
    return getattr(engine, "_slot", None) or getattr(engine, "slot", None)


def engine_scheduler(crawler: Crawler | None) -> Any:
    """The running scheduler of ``crawler``, or None."""
    engine = getattr(crawler, "engine", None)
    return getattr(_slot(engine), "scheduler", None)


def engine_accepts_requests(crawler: Crawler) -> bool:
    """Whether ``crawler.engine.crawl()`` may be called now (running, not closing)."""
    engine = crawler.engine
    slot = _slot(engine)
    return bool(engine and engine.running and slot is not None and slot.closing is None)


def engine_busy(crawler: Crawler | None) -> bool:
    """Whether the engine is downloading or processing responses."""
    engine = getattr(crawler, "engine", None)
    if engine is None:
        return False
    scraper_slot = getattr(getattr(engine, "scraper", None), "slot", None)
    scraper_busy = scraper_slot is not None and not scraper_slot.is_idle()
    return bool(engine.downloader.active) or scraper_busy
