"""What scrapy-redis needs of Scrapy's engine (across Scrapy versions) and reactor."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Container

    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class DownloaderSlot(NamedTuple):
    """The downloader slot a request goes to (one per domain by default)."""

    key: str
    #: Its DOWNLOAD_DELAY now (AutoThrottle adjusts it), in seconds.
    delay: float
    #: Whether the downloader holds no request at all.
    idle: bool


#: The attribute of the engine's slot that holds the requests it is working on:
#: Scrapy's private ``_Slot.inprogress``. A seam: a test sets it to a name Scrapy
#: lacks to crawl as under a future Scrapy without that set.
IN_PROGRESS_ATTRIBUTE = "inprogress"


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


class _EveryLiveRequest:
    """Stands for the engine's requests in progress under a Scrapy that keeps no such
    set: every request still alive may be in progress."""

    def __contains__(self, request: object) -> bool:
        return True


#: What engine_in_progress() returns when the engine's set is missing.
EVERY_LIVE_REQUEST: Container[Any] = _EveryLiveRequest()
_missing_warned = False


def engine_in_progress(crawler: Crawler | None) -> Container[Any] | None:
    """The requests the engine took from the scheduler and is not done with, or None
    before the engine has a slot (then nothing is known to be done).

    A request stays there from the moment the engine takes it until its
    download, callback or errback, item pipelines and the scheduling of what it
    produced (redirects and retries included) are all over. Under a Scrapy whose
    running engine has no such set, warns once and returns
    :data:`EVERY_LIVE_REQUEST`: a request is then done only once it is freed.
    """
    engine = engine_of(crawler)
    slot = _slot(engine)
    in_progress = getattr(slot, IN_PROGRESS_ATTRIBUTE, None)
    if in_progress is not None:
        return in_progress  # type: ignore[no-any-return]
    if slot is None and not getattr(engine, "running", False):
        return None  # no engine, or not started yet
    _warn_missing_in_progress()
    return EVERY_LIVE_REQUEST


def _warn_missing_in_progress() -> None:
    global _missing_warned
    if _missing_warned:
        return
    _missing_warned = True
    import scrapy

    logger.warning(
        "The engine of Scrapy %(version)s has no slot.%(attribute)s (the requests it is "
        "working on), which scrapy-redis reads to release the leases of finished requests. "
        "Falling back: a handed-out request counts as finished once Scrapy has freed it; "
        "one kept alive elsewhere (a reference in your own code, a reference cycle until "
        "the garbage collector runs) stays leased until this worker closes, and is then "
        "put back in the queue. Please report this to scrapy-redis with your Scrapy version.",
        {"version": scrapy.__version__, "attribute": IN_PROGRESS_ATTRIBUTE},
    )


def engine_downloader(crawler: Crawler | None) -> Any:
    """The engine's downloader, if it has what :func:`downloader_slot` reads, else None."""
    downloader = getattr(engine_of(crawler), "downloader", None)
    if all(hasattr(downloader, name) for name in ("slots", "active", "get_slot_key")):
        return downloader
    return None


def downloader_slot(downloader: Any, request: Request, crawler: Crawler) -> DownloaderSlot:
    """Where ``request`` will wait for its download in ``downloader`` (see
    :func:`engine_downloader`).

    The key from Scrapy's ``Downloader.get_slot_key()`` (its parsed URL is cached
    for the downloader); the delay of that slot in ``Downloader.slots`` (as
    AutoThrottle adjusts it), or DOWNLOAD_DELAY for a slot not created yet;
    whether ``Downloader.active`` is empty.
    """
    key: str = downloader.get_slot_key(request)
    slot = downloader.slots.get(key)
    delay = getattr(slot, "delay", None)
    if delay is None:
        delay = crawler.settings.getfloat("DOWNLOAD_DELAY")
    return DownloaderSlot(key, delay, not downloader.active)


def wake_engine(crawler: Crawler | None) -> None:
    """Make the engine ask the scheduler for requests again soon."""
    nextcall = getattr(_slot(engine_of(crawler)), "nextcall", None)
    if nextcall is not None:
        nextcall.schedule()
