"""What the scheduler tells the user at open and at close: the queue it shares and
where, a crawl it resumes, what the last worker deleted."""

from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import RedisError
from scrapy import Spider

from scrapy_redis.scheduling.parts import fingerprint_count
from scrapy_redis.store.describe import describe_server

logger = logging.getLogger("scrapy_redis.scheduler")


def log_resuming(spider: Any, pending: int) -> None:
    """Log "Resuming crawl (N requests scheduled)" where the user sees it.

    The original called ``spider.log(message)``: a spider whose ``log`` is its own
    or patched (users' tests do) still gets that call. Otherwise the message goes to
    the spider's logger at INFO, seen with ``LOG_LEVEL = "INFO"`` (Scrapy deprecated
    ``Spider.log()``, which logged it at DEBUG).
    """
    message = f"Resuming crawl ({pending} requests scheduled)"
    log = getattr(spider, "log", None)
    if callable(log) and getattr(log, "__func__", None) is not Spider.log:
        log(message)
    else:
        getattr(spider, "logger", logger).info(message)


def log_sharing(queue: Any, server: Any, spider: Any) -> None:
    """The INFO line naming the shared queue and the server it is on (password masked)."""
    logger.info(
        "Sharing the queue %(queue)s at %(server)s",
        {"queue": getattr(queue, "key", None), "server": describe_server(server)},
        extra={"spider": spider},
    )


def shared_counts(queue: Any, dupefilter: Any) -> tuple[int | None, int | None]:
    """The requests queued and the fingerprints recorded (None: cannot tell), read
    before the last worker deletes them."""
    try:
        queued: int | None = len(queue)
    except (TypeError, NotImplementedError, RedisError):
        queued = None
    return queued, fingerprint_count([dupefilter, *getattr(queue, "filters", ())])
