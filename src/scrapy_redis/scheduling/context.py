"""What the parts of one scheduler share (see scheduler.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy_redis.scheduling.stats import SchedulerStats
    from scrapy_redis.scheduling.wakeup import NewsChannel
    from scrapy_redis.store.guarded import RedisCalls


@dataclass(frozen=True, slots=True)
class SchedulerContext:
    """The queue, the Redis calls, the counters and the news channel of one scheduler,
    with its crawler, spider (for the logs) and reactor (for its timers)."""

    queue: Any
    calls: RedisCalls
    counts: SchedulerStats
    news: NewsChannel
    crawler: Any = None
    spider: Any = None
    #: Twisted's reactor (None: the installed one), or a ``task.Clock`` in tests.
    reactor: Any = None
