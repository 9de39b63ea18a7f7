"""What the other components (the spiders, the stats collector) ask of our scheduler.

A typed protocol rather than ``getattr``/``hasattr`` on whatever scheduler the
engine runs: Scrapy's own scheduler, or another one, does not provide it, and
then they behave as with the original package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from scrapy_redis.core.engine import engine_scheduler

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


@runtime_checkable
class SharedScheduler(Protocol):
    """A scheduler whose queue is shared by many workers through Redis."""

    #: After close: whether this worker, the last one, deleted the shared data
    #: (None: it could not tell, Redis being unreachable).
    cleared_shared_data: bool | None

    def send_enqueued(self) -> bool:
        """Send the requests waiting in this worker now; whether none is left waiting."""
        ...

    def shared_work_pending(self) -> bool:
        """Whether work may still come from the shared queue (or this worker's memory)."""
        ...


def shared_scheduler(crawler: Crawler | None) -> SharedScheduler | None:
    """The running scheduler of ``crawler`` if it is a :class:`SharedScheduler`, else None."""
    scheduler = engine_scheduler(crawler)
    return scheduler if isinstance(scheduler, SharedScheduler) else None
