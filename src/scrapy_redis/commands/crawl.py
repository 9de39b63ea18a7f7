"""One spider's crawl in Redis, as its workers see it: the queue (split into lanes or
not), the duplicate filters, the start keys, the items list.

:func:`open_crawl` builds the spider and the scheduler's queue and filter the way a
worker does (the project's settings, the spider's ``custom_settings`` and arguments),
without joining the crawl: it writes nothing to Redis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy.crawler import Crawler
from scrapy.utils.misc import load_object

from scrapy_redis import connection, defaults
from scrapy_redis.connection import is_cluster
from scrapy_redis.fleet.crawl_keys import recorded_lanes
from scrapy_redis.scheduler import Scheduler
from scrapy_redis.scheduling.lane_split import split_into_lanes
from scrapy_redis.scheduling.lanes import LanedQueue
from scrapy_redis.spiders import RedisMixin
from scrapy_redis.start.settings import normalize_redis_key, start_mode
from scrapy_redis.store.keys import format_key
from scrapy_redis.utils import load_configured

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.settings import BaseSettings, Settings


@dataclass
class Crawl:
    """What the verbs operate on."""

    spider: Spider
    #: The spider's settings: the project's, its ``custom_settings``, ``-s`` options.
    settings: BaseSettings
    server: Any
    #: The scheduler's queue (a LanedQueue when split), None if SCHEDULER is not ours.
    queue: Any
    #: The queues holding requests: the lanes of a split crawl, else ``[queue]``.
    lanes: list[Any]
    #: The duplicate filter of each lane (or the one filter); [] if not ours.
    filters: list[Any]
    #: The spider's start keys, highest priority first ([] if not a Redis spider).
    start_keys: list[str]
    #: "list", "set" or "zset" (REDIS_START_URLS_AS_SET / _AS_ZSET).
    start_mode: str
    #: RedisPipeline's list (REDIS_ITEMS_KEY).
    items_key: str

    @property
    def name(self) -> str:
        return self.spider.name

    @property
    def cluster(self) -> bool:
        return is_cluster(self.server)

    @property
    def queue_key(self) -> str:
        """SCHEDULER_QUEUE_KEY, formatted."""
        template = self.settings.get("SCHEDULER_QUEUE_KEY") or defaults.SCHEDULER_QUEUE_KEY
        return format_key(template, self.name)


def open_crawl(settings: Settings, spidercls: type[Spider], spider_args: dict[str, str]) -> Crawl:
    """The crawl of ``spidercls`` (see the module)."""
    crawler = Crawler(spidercls, settings.copy(), init_reactor=True)
    # Stats, the request fingerprinter and the reactor, as `scrapy crawl` sets them up
    # before it builds the spider (Scrapy has no public method for this step alone).
    crawler._apply_settings()
    spider = spidercls.from_crawler(crawler, **spider_args)
    crawler.spider = spider
    server = _server(crawler, spider)
    queue, filters = _queue_and_filters(crawler, spider)
    lanes = list(queue.lanes) if isinstance(queue, LanedQueue) else [] if queue is None else [queue]
    items = crawler.settings.get("REDIS_ITEMS_KEY") or defaults.PIPELINE_KEY
    return Crawl(
        spider=spider,
        settings=crawler.settings,
        server=server,
        queue=queue,
        lanes=lanes,
        filters=filters,
        start_keys=_start_keys(spider, crawler.settings),
        start_mode=start_mode(crawler.settings),
        items_key=format_key(items, spider.name),
    )


def _server(crawler: Crawler, spider: Spider) -> Any:
    """The spider's client (a Redis spider's), else the one of the crawler's settings."""
    server = getattr(spider, "server", None)
    return server if server is not None else connection.from_settings(crawler.settings)


def uses_our_scheduler(settings: BaseSettings) -> bool:
    """Whether SCHEDULER is scrapy-redis's Scheduler (or a subclass)."""
    scheduler = settings.get("SCHEDULER")
    cls = load_object(scheduler) if isinstance(scheduler, str) else scheduler
    return isinstance(cls, type) and issubclass(cls, Scheduler)


def _queue_and_filters(crawler: Crawler, spider: Spider) -> tuple[Any, list[Any]]:
    """The queue and filters the scheduler builds in ``open()`` (lanes included)."""
    if not uses_our_scheduler(crawler.settings):
        return None, []
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.spider = spider
    if scheduler.df is None:
        dupefilter_cls = load_configured("DUPEFILTER_CLASS", scheduler.dupefilter_cls)
        scheduler.df = dupefilter_cls.from_spider(spider)
    queue_cls = load_configured("SCHEDULER_QUEUE_CLASS", scheduler.queue_cls)
    queue = queue_cls(
        server=scheduler.server,
        spider=spider,
        key=format_key(scheduler.queue_key, spider.name),
        serializer=scheduler.serializer,
    )
    recorded = recorded_lanes(scheduler.server, queue.key, is_cluster(scheduler.server))
    if recorded is not None:  # the lanes the crawl's data has (the first worker recorded)
        scheduler.shards = recorded
    queue = split_into_lanes(scheduler, spider, queue)
    return queue, list(getattr(queue, "filters", None) or [scheduler.df])


def _start_keys(spider: Spider, settings: BaseSettings) -> list[str]:
    if not isinstance(spider, RedisMixin):
        return []
    keys = getattr(spider, "_redis_keys", None)  # set by setup_redis() (all the keys)
    if keys:
        return list(keys)
    value = spider.redis_key or settings.get("REDIS_START_URLS_KEY", defaults.START_URLS_KEY)
    return normalize_redis_key(value, spider.name)
