"""What scrapy-redis needs to know of Scrapy's engine, across Scrapy versions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


def engine_of(crawler: Crawler | None) -> Any:
    """``crawler.engine``, or None before the crawl starts."""
    try:
        return getattr(crawler, "engine", None)
    except RuntimeError:  # Scrapy >= 2.19 raises before the crawl starts
        return None


def _slot(engine: Any) -> Any:
    return getattr(engine, "_slot", None) or getattr(engine, "slot", None)


def engine_scheduler(crawler: Crawler | None) -> Any:
    """The running scheduler of ``crawler``, or None."""
    return getattr(_slot(engine_of(crawler)), "scheduler", None)


def engine_accepts_requests(crawler: Crawler) -> bool:
    """Whether ``crawler.engine.crawl()`` may be called now (running, not closing)."""
    engine = engine_of(crawler)
    slot = _slot(engine)
    return bool(engine and engine.running and slot is not None and slot.closing is None)


def engine_busy(crawler: Crawler | None) -> bool:
    """Whether the engine is downloading or processing responses."""
    engine = engine_of(crawler)
    if engine is None:
        return False
    scraper_slot = getattr(getattr(engine, "scraper", None), "slot", None)
    scraper_busy = scraper_slot is not None and not scraper_slot.is_idle()
    return bool(engine.downloader.active) or scraper_busy


def wake_engine(crawler: Crawler | None) -> None:
    """Make the engine ask the scheduler for requests again soon."""
    nextcall = getattr(_slot(engine_of(crawler)), "nextcall", None)
    if nextcall is not None:
        nextcall.schedule()
