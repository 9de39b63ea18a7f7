"""The Scheduler's settings: read from Scrapy's settings, and checked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy_redis import defaults
from scrapy_redis.dupefilters.settings import dupefilter_class_path  # re-exported

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def scheduler_kwargs(settings: BaseSettings) -> dict[str, Any]:
    """The Scheduler's constructor arguments, read from ``settings``."""

    def number(name: str, kind: str = "getint") -> Any:
        return getattr(settings, kind)(name, getattr(defaults, name))

    def text(name: str) -> Any:
        return settings.get(name) or getattr(defaults, name)

    return {
        "persist": settings.getbool("SCHEDULER_PERSIST", defaults.SCHEDULER_PERSIST),
        "flush_on_start": settings.getbool(
            "SCHEDULER_FLUSH_ON_START", defaults.SCHEDULER_FLUSH_ON_START
        ),
        "idle_before_close": number("SCHEDULER_IDLE_BEFORE_CLOSE", "getfloat"),
        "queue_key": text("SCHEDULER_QUEUE_KEY"),
        "queue_cls": text("SCHEDULER_QUEUE_CLASS"),
        "dupefilter_key": text("SCHEDULER_DUPEFILTER_KEY"),
        "dupefilter_cls": dupefilter_class_path(settings),
        "serializer": text("SCHEDULER_SERIALIZER"),
        "worker_timeout": number("SCHEDULER_WORKER_TIMEOUT", "getfloat"),
        "max_deliveries": number("SCHEDULER_MAX_DELIVERIES"),
        "enqueue_delay": number("SCHEDULER_ENQUEUE_DELAY", "getfloat"),
        "enqueue_batch_size": number("SCHEDULER_ENQUEUE_BATCH_SIZE"),
        "prefetch": number("SCHEDULER_PREFETCH"),
        "seen_cache_size": number("SCHEDULER_SEEN_CACHE_SIZE"),
        "shards": None if settings.get("SCHEDULER_SHARDS") is None else number("SCHEDULER_SHARDS"),
    }


def check_scheduler_args(scheduler: Any) -> None:
    """ValueError naming the setting and the fix for a value the Scheduler cannot use."""
    idle_before_close, worker_timeout = scheduler.idle_before_close, scheduler.worker_timeout
    max_deliveries, enqueue_delay = scheduler.max_deliveries, scheduler.enqueue_delay
    enqueue_batch_size, prefetch = scheduler.enqueue_batch_size, scheduler.prefetch
    if idle_before_close < 0:
        raise ValueError(
            f"SCHEDULER_IDLE_BEFORE_CLOSE = {idle_before_close!r} cannot be negative; "
            "use 0 to stop waiting for new requests as soon as the queue is empty."
        )
    if worker_timeout <= 0:
        raise ValueError(f"SCHEDULER_WORKER_TIMEOUT = {worker_timeout!r} must be positive.")
    if max_deliveries < 0:
        raise ValueError(
            f"SCHEDULER_MAX_DELIVERIES = {max_deliveries!r} cannot be negative; use 0 to "
            "put a dead worker's requests back in the queue however often it happens."
        )
    if enqueue_delay < 0:
        raise ValueError(
            f"SCHEDULER_ENQUEUE_DELAY = {enqueue_delay!r} cannot be negative; use 0 to "
            "push every request to Redis as soon as it is enqueued."
        )
    if enqueue_batch_size < 1 or prefetch < 1:
        raise ValueError(
            f"SCHEDULER_ENQUEUE_BATCH_SIZE = {enqueue_batch_size!r} and SCHEDULER_PREFETCH = "
            f"{prefetch!r} must be at least 1."
        )
