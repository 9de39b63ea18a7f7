"""The Redis keys of one spider's crawl, as its workers compute them from the project's
settings: for the tools that look at a crawl from outside (``scrapy redis``, the
dashboard, see :mod:`scrapy_redis.fleet.status`), not for the workers themselves."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import load_object

from scrapy_redis import defaults
from scrapy_redis.connection import from_settings, is_cluster, redis_settings_signature
from scrapy_redis.exceptions import ConfigurationError
from scrapy_redis.scheduling.lane_split import MAX_LANES
from scrapy_redis.spiders import RedisMixin
from scrapy_redis.start.settings import normalize_redis_key, start_mode
from scrapy_redis.store.keys import (
    crawl_filter_key,
    format_key,
    lane_filter_key,
    lane_queue_key,
    lane_tags,
    lanes_key,
)
from scrapy_redis.store.redis_values import Reader, UnreadableValueError, integer

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


@dataclass(frozen=True)
class CrawlKeys:
    """Where the crawl of one spider is kept."""

    spider: str
    cluster: bool
    #: The queue named by SCHEDULER_QUEUE_KEY (its registry and lane count derive from it).
    queue_key: str
    queue_class_name: str
    #: The queues requests are in: the queue itself, or its lanes (SCHEDULER_SHARDS).
    queue_keys: tuple[str, ...]
    #: The duplicate filters, one per queue in ``queue_keys``.
    filter_keys: tuple[str, ...]
    stats_key: str
    items_key: str
    #: The spider's start keys (a RedisSpider's redis_key), highest priority first.
    start_keys: tuple[str, ...]
    #: "list", "set" or "zset" (REDIS_START_URLS_AS_SET / _AS_ZSET).
    start_mode: str
    worker_timeout: float
    #: SCHEDULER_FLEET_LIMITS, and DOWNLOAD_DELAY (see scrapy_redis.fleet.diagnosis.shared_delay).
    fleet_limits: bool = False
    download_delay: float = 0.0

    @property
    def lanes(self) -> int:
        """How many lanes (0: unknown, the lane record is unreadable)."""
        return len(self.queue_keys)


def spider_settings(settings: BaseSettings, spidercls: type) -> BaseSettings:
    """The project's settings with the spider's ``custom_settings`` applied."""
    merged = settings.copy()
    update = getattr(spidercls, "update_settings", None)
    if update is not None:
        update(merged)
    return merged


class SpiderServers:
    """The Redis client of each spider: ``default`` (the project's), unless the spider's
    ``custom_settings`` name another server (REDIS_URL, REDIS_PARAMS...): then a client
    of its own, one per distinct server settings."""

    def __init__(self, settings: BaseSettings, default: Any) -> None:
        self.settings = settings
        self.default = default
        self._project = redis_settings_signature(settings)
        self._clients: dict[str, Any] = {}

    def of(self, spidercls: type) -> Any:
        settings = spider_settings(self.settings, spidercls)
        signature = redis_settings_signature(settings)
        if signature == self._project:
            return self.default
        if signature not in self._clients:
            self._clients[signature] = from_settings(settings)
        return self._clients[signature]


def crawl_keys(
    server: Any, settings: BaseSettings, spidercls: type, problems: list[str] | None = None
) -> CrawlKeys:
    """The keys of the crawl of ``spidercls`` (reads the lane count the crawl recorded:
    if it is unreadable, :class:`~scrapy_redis.store.redis_values.UnreadableValueError`; with
    ``problems``, said there, and no lane is known: ``queue_keys`` is empty)."""
    settings = spider_settings(settings, spidercls)
    name = spidercls.name  # type: ignore[attr-defined]
    cluster = is_cluster(server)
    queue_key = format_key(_text(settings, "SCHEDULER_QUEUE_KEY"), name)
    filter_key = format_key(_text(settings, "SCHEDULER_DUPEFILTER_KEY"), name)
    queues, filters = _lanes(server, queue_key, filter_key, cluster, problems)
    queue_class = settings.get("SCHEDULER_QUEUE_CLASS") or defaults.SCHEDULER_QUEUE_CLASS
    return CrawlKeys(
        spider=name,
        cluster=cluster,
        queue_key=queue_key,
        queue_class_name=_class_name(queue_class),
        queue_keys=queues,
        filter_keys=filters,
        stats_key=format_key(settings.get("STATS_KEY") or defaults.STATS_KEY, name),
        items_key=format_key(settings.get("REDIS_ITEMS_KEY") or defaults.PIPELINE_KEY, name),
        start_keys=start_keys_of(settings, spidercls),
        start_mode=start_mode(settings),
        worker_timeout=settings.getfloat(
            "SCHEDULER_WORKER_TIMEOUT", defaults.SCHEDULER_WORKER_TIMEOUT
        ),
        fleet_limits=settings.getbool("SCHEDULER_FLEET_LIMITS", defaults.SCHEDULER_FLEET_LIMITS),
        download_delay=settings.getfloat("DOWNLOAD_DELAY"),
    )


def _text(settings: BaseSettings, name: str) -> str:
    return str(settings.get(name) or getattr(defaults, name))


def _class_name(path_or_class: Any) -> str:
    try:
        cls = load_object(path_or_class) if isinstance(path_or_class, str) else path_or_class
    except (ImportError, NameError, ValueError):
        return str(path_or_class).rsplit(".", 1)[-1]
    return str(getattr(cls, "__name__", cls))


def recorded_lanes(server: Any, queue_key: str, cluster: bool) -> int | None:
    """The lane count the crawl of ``queue_key`` recorded (None: none recorded), checked
    as the workers check SCHEDULER_SHARDS (1 to MAX_LANES); else
    :class:`~scrapy_redis.store.redis_values.UnreadableValueError` naming the key."""
    key = lanes_key(queue_key, cluster)
    recorded = Reader(server).get(key)
    return None if recorded is None else integer(recorded, key, low=1, high=MAX_LANES)


def _lanes(
    server: Any, queue_key: str, filter_key: str, cluster: bool, problems: list[str] | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The queues and filters: one of each, or a pair per lane the crawl recorded (none,
    with ``problems``, when the record is unreadable: said there)."""
    try:
        count = recorded_lanes(server, queue_key, cluster) or 1
    except UnreadableValueError as exc:
        if problems is None:
            raise
        problems.append(exc.detail)
        return (), ()
    if count > 1:
        tags = lane_tags(queue_key, count)
        return (
            tuple(lane_queue_key(tag) for tag in tags),
            tuple(lane_filter_key(filter_key, tag) for tag in tags),
        )
    with suppress(ConfigurationError):  # the workers refuse such settings: shown as named
        filter_key = crawl_filter_key(filter_key, queue_key, cluster)
    return (queue_key,), (filter_key,)


def start_keys_of(settings: BaseSettings, spidercls: type) -> tuple[str, ...]:
    """The start keys of a RedisSpider (its ``redis_key``, else REDIS_START_URLS_KEY)."""
    if not issubclass(spidercls, RedisMixin):
        return ()
    template = spidercls.redis_key
    if template is None:
        template = settings.get("REDIS_START_URLS_KEY", defaults.START_URLS_KEY)
    try:
        return tuple(normalize_redis_key(template, spidercls.name))
    except (TypeError, ValueError):
        return ()
