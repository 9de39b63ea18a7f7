"""The settings of a Redis spider, read and checked once, as one frozen value.

Each spider attribute (``redis_key``, ``redis_batch_size``, ``redis_encoding``,
``redis_key_check_interval``, ``max_idle_time``; set on the class or given as a
spider argument) wins over its setting; the rest comes from the settings only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from scrapy_redis import defaults
from scrapy_redis.start.messages import StartMessageRules
from scrapy_redis.store.keys import format_key

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


class SpiderArguments(Protocol):
    """The spider attributes that override settings (None: not given)."""

    name: str
    redis_key: Any
    redis_batch_size: Any
    redis_encoding: str | None
    redis_key_check_interval: Any
    max_idle_time: Any


@dataclass(frozen=True)
class StartSettings:
    """What a Redis spider reads its start messages with, and how long it may idle."""

    #: The start keys, highest priority first (the first one names the lease keys).
    keys: tuple[str, ...]
    batch_size: int
    encoding: str | None
    key_check_interval: float
    max_idle_time: float
    #: "list", "set" or "zset" (REDIS_START_URLS_AS_SET / _AS_ZSET).
    mode: str
    dont_filter: bool
    poll_interval: float
    worker_timeout: float
    max_deliveries: int
    #: REDIS_START_URLS_SCHEMES and REDIS_START_URLS_MAX_SIZE.
    message_rules: StartMessageRules = field(default_factory=StartMessageRules)


def read_start_settings(spider: SpiderArguments, settings: BaseSettings) -> StartSettings:
    """The spider's settings, its own attributes first; ValueError/TypeError names a bad one."""
    return StartSettings(
        keys=tuple(normalize_redis_key(_redis_key(spider, settings), spider.name)),
        batch_size=_batch_size(spider, settings),
        encoding=spider.redis_encoding or settings.get("REDIS_ENCODING", defaults.REDIS_ENCODING),
        key_check_interval=_as_interval(
            _given(spider.redis_key_check_interval, settings, "REDIS_KEY_CHECK_INTERVAL"),
            "redis_key_check_interval",
        ),
        max_idle_time=_as_seconds(
            _given(spider.max_idle_time, settings, "MAX_IDLE_TIME_BEFORE_CLOSE"), "max_idle_time"
        ),
        mode=start_mode(settings),
        dont_filter=settings.getbool(
            "REDIS_START_URLS_DONT_FILTER", defaults.START_URLS_DONT_FILTER
        ),
        poll_interval=settings.getfloat(
            "REDIS_START_URLS_POLL_INTERVAL", defaults.START_URLS_POLL_INTERVAL
        ),
        worker_timeout=settings.getfloat(
            "SCHEDULER_WORKER_TIMEOUT", defaults.SCHEDULER_WORKER_TIMEOUT
        ),
        max_deliveries=settings.getint(
            "SCHEDULER_MAX_DELIVERIES", defaults.SCHEDULER_MAX_DELIVERIES
        ),
        message_rules=StartMessageRules.from_settings(settings),
    )


_SETTING_DEFAULTS = {
    "REDIS_KEY_CHECK_INTERVAL": defaults.REDIS_KEY_CHECK_INTERVAL,
    "MAX_IDLE_TIME_BEFORE_CLOSE": defaults.MAX_IDLE_TIME,
}


def _given(value: Any, settings: BaseSettings, name: str) -> Any:
    """The spider's own value unless it is None, else the setting ``name``."""
    return value if value is not None else settings.get(name, _SETTING_DEFAULTS[name])


def _redis_key(spider: SpiderArguments, settings: BaseSettings) -> Any:
    if spider.redis_key is not None:  # "" and [] are refused, not replaced
        return spider.redis_key
    return settings.get("REDIS_START_URLS_KEY", defaults.START_URLS_KEY)


def _batch_size(spider: SpiderArguments, settings: BaseSettings) -> int:
    return _as_positive_int(
        spider.redis_batch_size
        or settings.get("REDIS_START_URLS_BATCH_SIZE")
        or settings.getint("CONCURRENT_REQUESTS", defaults.REDIS_CONCURRENT_REQUESTS),
        "redis_batch_size",
    )


def normalize_redis_key(value: Any, spider_name: str) -> list[str]:
    """``redis_key`` (a template or a list of them, highest priority first) as key names."""
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("redis_key must not be empty")
        return [format_key(value, spider_name)]
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"redis_key must be a string or a list of strings, not {value!r}")
    keys: list[str] = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"redis_key must not contain empty or non-string keys: {value!r}")
        key = format_key(item.strip(), spider_name)
        if key not in keys:
            keys.append(key)
    if not keys:
        raise ValueError("redis_key list is empty after normalization")
    return keys


def start_mode(settings: BaseSettings) -> str:
    """Where start messages are kept: "set", "zset" or "list" (SET wins over ZSET)."""
    if settings.getbool("REDIS_START_URLS_AS_SET", defaults.START_URLS_AS_SET):
        return "set"
    if settings.getbool("REDIS_START_URLS_AS_ZSET", defaults.START_URLS_AS_ZSET):
        return "zset"
    return "list"


def _as_positive_int(value: Any, name: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, not {value!r}") from None
    if number <= 0:
        raise ValueError(f"{name} must be positive, not {value!r}")
    return number


def _as_seconds(value: Any, name: str) -> float:
    if value in (None, "", "0"):
        return 0
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number of seconds, not {value!r}") from None


def _as_interval(value: Any, name: str) -> float:
    seconds = _as_seconds(value, name)
    if seconds < 0:
        raise ValueError(f"{name} cannot be negative, not {value!r}")
    return seconds


def ignored_start_urls(spider: Any, keys: tuple[str, ...]) -> str | None:
    """The warning for a Redis spider whose ``start_urls`` are set but never read (its
    start requests come from ``keys``), or None."""
    urls = getattr(spider, "start_urls", None)
    if not urls:
        return None
    count = len(urls) if isinstance(urls, (list, tuple, set)) else "some"
    return (
        f"{type(spider).__name__}.start_urls ({count} URLs) is ignored: a Redis spider reads "
        f"its start URLs from Redis ({', '.join(keys)}). Push them there "
        f"(scrapy redis push {spider.name} URL...), or remove start_urls."
    )
