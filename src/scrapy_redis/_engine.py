"""What scrapy-redis needs of Scrapy's engine (across Scrapy versions) and reactor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


def installed_reactor() -> Any:
    """Twisted's reactor, imported only when needed: Scrapy installs the one it wants."""
    from twisted.internet import reactor

    return reactor


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


def engine_in_progress(crawler: Crawler | None) -> Any:
    """The requests the engine took from the scheduler and is not done with, or None.

    A request stays there from the moment the engine takes it until its
    download, callback or errback, item pipelines and the scheduling of what it
    produced (redirects and retries included) are all over.
    """
    return getattr(_slot(engine_of(crawler)), "inprogress", None)


def wake_engine(crawler: Crawler | None) -> None:
    """Make the engine ask the scheduler for requests again soon."""
    nextcall = getattr(_slot(engine_of(crawler)), "nextcall", None)
    if nextcall is not None:
        nextcall.schedule()
