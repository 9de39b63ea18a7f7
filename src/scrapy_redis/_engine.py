"""What scrapy-redis needs of Scrapy's engine (across Scrapy versions) and reactor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler


class DownloaderSlot(NamedTuple):
    """The downloader slot a request goes to (one per domain by default)."""

    key: str
    #: Its DOWNLOAD_DELAY now (AutoThrottle adjusts it), in seconds.
    delay: float
    #: Whether the downloader holds no request at all.
    idle: bool


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


def has_downloader(crawler: Crawler | None) -> bool:
    """Whether :func:`downloader_slot` can tell anything (an engine with a downloader)."""
    return getattr(getattr(engine_of(crawler), "downloader", None), "slots", None) is not None


def downloader_slot(crawler: Crawler | None, request: Request) -> DownloaderSlot | None:
    """Where ``request`` will wait for its download, or None if unknown.

    The key from Scrapy's ``Downloader.get_slot_key()``; the delay of that slot in
    ``Downloader.slots`` (as AutoThrottle adjusts it), or DOWNLOAD_DELAY for a slot
    not created yet; whether ``Downloader.active`` is empty.
    """
    downloader: Any = getattr(engine_of(crawler), "downloader", None)
    if crawler is None or getattr(downloader, "slots", None) is None:
        return None
    try:
        key: str = downloader.get_slot_key(request)
        slot = downloader.slots.get(key)
        delay = slot.delay if slot is not None else crawler.settings.getfloat("DOWNLOAD_DELAY")
        return DownloaderSlot(key, delay, not downloader.active)
    except AttributeError:  # another Scrapy's downloader: no pacing
        return None


def wake_engine(crawler: Crawler | None) -> None:
    """Make the engine ask the scheduler for requests again soon."""
    nextcall = getattr(_slot(engine_of(crawler)), "nextcall", None)
    if nextcall is not None:
        nextcall.schedule()
