"""Drop-in fidelity with code written for the original scrapy-redis.

Subclasses written against the original (their own ``__init__`` that does not
call ours, or ours called with the original's positional signature), tests that
patch the names the original looked its client up through, the package
metadata, log routes and small validations, and the per-worker seen cache when
Redis loses data under it.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from unittest import mock

import pytest
import redis
from scrapy import Request, Spider, signals
from scrapy.settings import Settings
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

import scrapy_redis
from helpers import DemoSpider, make_spider
from redis_server import RedisServer
from scrapy_redis import connection
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.exceptions import UndecodableRequestError
from scrapy_redis.pipelines import RedisPipeline
from scrapy_redis.queue import FifoQueue
from scrapy_redis.scheduler import Scheduler
from scrapy_redis.scheduling.workers import crawler_worker_id
from scrapy_redis.spiders import RedisSpider
from scrapy_redis.stats import RedisStatsCollector

ROOT = Path(__file__).resolve().parents[1]


class StartSpider(RedisSpider):
    name = "start"

    def parse(self, response):  # pragma: no cover
        return None


def _crawler(settings, spidercls=DemoSpider):
    crawler = get_crawler(spidercls, settings)
    crawler.spider = crawler.spidercls.from_crawler(crawler)
    return crawler


# -- 1. subclasses written for the original ----------------------------------------------


class OwnInitDupeFilter(RFPDupeFilter):
    """Like scrapy-redis-bloomfilter 0.8.1: its own __init__, ours never called."""

    def __init__(self, server, key, debug, bit, hash_number):
        self.server = server
        self.key = key
        self.debug = debug
        self.bit = bit
        self.hash_number = hash_number
        self.logdupes = True

    @classmethod
    def from_spider(cls, spider):
        settings = spider.settings
        server = connection.get_redis_from_settings(settings)
        key = settings.get("SCHEDULER_DUPEFILTER_KEY", "%(spider)s:dupefilter") % {
            "spider": spider.name
        }
        return cls(server, key=key, debug=False, bit=20, hash_number=6)


class OriginalStyleScheduler(Scheduler):
    """Like scrapy-redis-bf 0.1.2: the original's __init__, from_settings and open(),
    none of ours called."""

    def __init__(self, server, persist=False, flush_on_start=False,
                 queue_key="%(spider)s:requests", queue_cls="scrapy_redis.queue.PriorityQueue",
                 dupefilter_key="%(spider)s:dupefilter",
                 dupefilter_cls="scrapy_redis.dupefilter.RFPDupeFilter", idle_before_close=0,
                 serializer=None):  # fmt: skip
        self.server = server
        self.persist = persist
        self.flush_on_start = flush_on_start
        self.queue_key = queue_key
        self.queue_cls = queue_cls
        self.dupefilter_cls = dupefilter_cls
        self.dupefilter_key = dupefilter_key
        self.idle_before_close = idle_before_close
        self.serializer = serializer
        self.stats = None

    @classmethod
    def from_settings(cls, settings):
        kwargs = {"persist": settings.getbool("SCHEDULER_PERSIST")}
        if settings.get("DUPEFILTER_CLASS"):
            kwargs["dupefilter_cls"] = settings.get("DUPEFILTER_CLASS")
        server = connection.from_settings(settings)
        server.ping()
        return cls(server=server, **kwargs)

    @classmethod
    def from_crawler(cls, crawler):
        instance = cls.from_settings(crawler.settings)
        instance.stats = crawler.stats
        return instance

    def open(self, spider):
        from scrapy.utils.misc import load_object

        self.spider = spider
        self.queue = load_object(self.queue_cls)(
            server=self.server,
            spider=spider,
            key=self.queue_key % {"spider": spider.name},
            serializer=self.serializer,
        )
        self.df = load_object(self.dupefilter_cls).from_spider(spider)
        if self.flush_on_start:
            self.flush()
        if len(self.queue):
            spider.log(f"Resuming crawl ({len(self.queue)} requests scheduled)")


class PositionalScheduler(Scheduler):
    """A subclass calling ours with the original's positional signature."""

    def __init__(self, server, persist, flush_on_start, queue_key, queue_cls, dupefilter_key,
                 dupefilter_cls, idle_before_close, serializer, extra="x"):  # fmt: skip
        super().__init__(server, persist, flush_on_start, queue_key, queue_cls, None,
                         dupefilter_key, dupefilter_cls, idle_before_close, serializer)  # fmt: skip
        self.extra = extra

    @classmethod
    def from_crawler(cls, crawler):
        settings = crawler.settings
        return cls(connection.from_settings(settings), False, False, "%(spider)s:requests",
                   "scrapy_redis.queue.PriorityQueue", "%(spider)s:dupefilter",
                   "scrapy_redis.dupefilter.RFPDupeFilter", 0, None)  # fmt: skip


def _run_scheduler(scheduler, spider):
    """Enqueue three requests (one twice), pop them all; what came out."""
    scheduler.open(spider)
    urls = ["http://example.com/a", "http://example.com/b", "http://example.com/a"]
    for url in urls:
        scheduler.enqueue_request(Request(url))
    assert scheduler.send_enqueued()
    popped = []
    while (request := scheduler.next_request()) is not None:
        popped.append(request.url)
    assert not scheduler.has_pending_requests()
    scheduler.close("finished")
    return popped


def test_dupefilter_subclass_with_its_own_init_works(settings_dict, server):
    spider = make_spider(settings_dict)
    df = OwnInitDupeFilter.from_spider(spider)
    assert df.request_seen(Request("http://example.com")) is False
    assert df.request_seen(Request("http://example.com")) is True
    df.log(Request("http://example.com"), spider)
    assert server.scard("demo:dupefilter") == 1


def test_scheduler_with_dupefilter_subclass_with_its_own_init(settings_dict, server):
    settings = {**settings_dict, "DUPEFILTER_CLASS": f"{__name__}.OwnInitDupeFilter"}
    crawler = _crawler(settings)
    scheduler = build_from_crawler(Scheduler, crawler)
    assert _run_scheduler(scheduler, crawler.spider) == [
        "http://example.com/a",
        "http://example.com/b",
    ]


def test_scheduler_subclass_without_our_init(settings_dict, server):
    from scrapy import signals

    settings = {**settings_dict, "SCHEDULER_PERSIST": True}
    crawler = _crawler(settings)
    dropped = []
    crawler.signals.connect(
        lambda request, spider: dropped.append(request.url), signals.request_dropped, weak=False
    )
    scheduler = build_from_crawler(OriginalStyleScheduler, crawler)
    assert _run_scheduler(scheduler, crawler.spider) == [
        "http://example.com/a",
        "http://example.com/b",
    ]
    assert server.scard("demo:dupefilter") == 2
    assert dropped == ["http://example.com/a"]  # the duplicate, reported as Scrapy does


def test_scheduler_subclass_without_our_init_flushes_without_persist(settings_dict, server):
    crawler = _crawler(settings_dict)
    scheduler = build_from_crawler(OriginalStyleScheduler, crawler)
    _run_scheduler(scheduler, crawler.spider)
    assert server.keys("demo:*") == []


def test_scheduler_subclass_with_positional_super_call(settings_dict, server):
    crawler = _crawler(settings_dict)
    scheduler = build_from_crawler(PositionalScheduler, crawler)
    assert scheduler.extra == "x"
    assert _run_scheduler(scheduler, crawler.spider) == [
        "http://example.com/a",
        "http://example.com/b",
    ]


class PositionalDupeFilter(RFPDupeFilter):
    def __init__(self, server, key, debug, extra):
        super().__init__(server, key, debug)
        self.extra = extra


class PositionalPipeline(RedisPipeline):
    def __init__(self, server, key, serialize_func):
        super().__init__(server, key, serialize_func)


def test_dupefilter_and_pipeline_subclasses_with_positional_super_calls(server):
    df = PositionalDupeFilter(server, "dupefilter:1", False, "x")
    assert df.request_seen(Request("http://example.com")) is False
    assert df.request_seen(Request("http://example.com")) is True
    df.close("finished")
    assert not server.exists("dupefilter:1")
    pipeline = PositionalPipeline(server, "items:%(spider)s", str)
    pipeline.process_item({"a": 1}, DemoSpider())
    pipeline.close_spider(None)
    assert server.lrange("items:demo", 0, -1) == [b"{'a': 1}"]


class OwnInitPipeline(RedisPipeline):
    def __init__(self, server, key):
        self.server = server
        self.key = key

    @classmethod
    def from_crawler(cls, crawler):
        return cls(connection.from_settings(crawler.settings), "%(spider)s:things")


def test_pipeline_subclass_without_our_init(settings_dict, server):
    crawler = _crawler(settings_dict)
    pipeline = build_from_crawler(OwnInitPipeline, crawler)
    pipeline.process_item({"a": 1}, crawler.spider)
    pipeline.close_spider(crawler.spider)
    assert server.lrange("demo:things", 0, -1) == [b'{"a": 1}']


class OwnInitStats(RedisStatsCollector):
    def __init__(self, crawler, spider=None):
        from scrapy.statscollectors import StatsCollector

        StatsCollector.__init__(self, crawler)
        self.server = connection.from_settings(crawler.settings)


def test_stats_subclass_without_our_init(settings_dict, server):
    crawler = _crawler({**settings_dict, "STATS_FLUSH_INTERVAL": 0})
    stats = OwnInitStats(crawler)
    stats.inc_value("pages", 2)
    stats.set_value("reason", "done")
    assert stats.get_value("pages") == 2
    assert stats.get_stats() == {"pages": 2, "reason": "done"}
    assert server.hget("demo:stats", "pages") == b"2"
    # This worker's own stats too, under the crawler's worker id.
    assert stats.get_worker_stats() == {"pages": 2, "reason": "done"}
    assert stats.worker_id == crawler_worker_id(crawler)
    assert server.hget(f"demo:stats:worker:{stats.worker_id}", "pages") == b"2"


class OwnSetupSpider(RedisSpider):
    """A spider written for the original: its own setup_redis() and next_requests()."""

    name = "own"

    def setup_redis(self, crawler=None):
        from scrapy import signals

        self.redis_key = f"{self.name}:start_urls"
        self.server = connection.from_settings(crawler.settings)
        crawler.signals.connect(self.spider_idle, signal=signals.spider_idle)

    def next_requests(self):
        for data in self.server.lpop(self.redis_key, 10) or []:
            yield Request(data.decode())


def test_spider_subclass_with_its_own_setup_redis(settings_dict, server, caplog):
    from scrapy.exceptions import DontCloseSpider

    crawler = get_crawler(OwnSetupSpider, settings_dict)
    spider = OwnSetupSpider.from_crawler(crawler)
    crawler.spider = spider
    crawler.engine = mock.Mock()  # Scrapy's engine, not Redis: it only records crawl() calls
    server.rpush("own:start_urls", "http://example.com/1", "http://example.com/2")
    with pytest.raises(DontCloseSpider):
        spider.spider_idle()
    crawled = [call.args[0].url for call in crawler.engine.crawl.call_args_list]
    assert crawled == ["http://example.com/1", "http://example.com/2"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


# -- 2. the names users' tests patch --------------------------------------------------------


def test_patching_spiders_connection_module(settings_dict):
    crawler = get_crawler(StartSpider, settings_dict)
    with mock.patch("scrapy_redis.spiders.connection") as patched:
        spider = StartSpider.from_crawler(crawler)
    patched.from_settings.assert_called_once_with(crawler.settings)
    assert spider.server is patched.from_settings.return_value


def test_patching_spiders_connection_from_settings(settings_dict):
    crawler = get_crawler(StartSpider, settings_dict)
    with mock.patch("scrapy_redis.spiders.connection.from_settings") as from_settings:
        spider = StartSpider.from_crawler(crawler)
    from_settings.assert_called_once_with(crawler.settings)
    assert spider.server is from_settings.return_value


def test_spider_fails_fast_when_redis_is_unreachable():
    from redis_server import free_port
    from scrapy_redis.exceptions import RedisUnavailableError

    crawler = get_crawler(StartSpider, {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"})
    with pytest.raises(RedisUnavailableError, match="Cannot connect to Redis"):
        StartSpider.from_crawler(crawler)


def test_patching_dupefilter_get_redis_from_settings(settings_dict):
    crawler = _crawler(settings_dict)
    with mock.patch("scrapy_redis.dupefilter.get_redis_from_settings") as get_redis:
        standalone = RFPDupeFilter.from_crawler(crawler)
        shared = RFPDupeFilter.from_spider(crawler.spider)
    assert get_redis.call_args_list == [mock.call(crawler.settings)] * 2
    assert standalone.server is shared.server is get_redis.return_value


@pytest.mark.parametrize(
    ("target", "component"),
    [
        ("scrapy_redis.scheduler.connection", Scheduler),
        ("scrapy_redis.pipelines.connection", RedisPipeline),
    ],
)
def test_patching_a_modules_connection(settings_dict, target, component):
    crawler = _crawler(settings_dict)
    with mock.patch(target) as patched:
        built = component.from_crawler(crawler)
    patched.from_settings.assert_called_once_with(crawler.settings)
    assert built.server is patched.from_settings.return_value


def test_patching_stats_redis_from_settings(settings_dict):
    crawler = _crawler(settings_dict)
    with mock.patch("scrapy_redis.stats.redis_from_settings") as from_settings:
        stats = RedisStatsCollector.from_crawler(crawler)
    from_settings.assert_called_once_with(crawler.settings)
    assert stats.server is from_settings.return_value


def test_one_client_per_crawler(settings_dict, server):
    crawler = get_crawler(StartSpider, settings_dict)
    spider = StartSpider.from_crawler(crawler)
    crawler.spider = spider
    clients = [
        spider.server,
        Scheduler.from_crawler(crawler).server,
        RFPDupeFilter.from_spider(spider).server,
        RFPDupeFilter.from_crawler(crawler).server,
        RedisPipeline.from_crawler(crawler).server,
        RedisStatsCollector.from_crawler(crawler).server,
        connection.get_redis_from_settings(crawler.settings),
        connection.from_settings(crawler.settings),
    ]
    assert all(client is clients[0] for client in clients)
    other = get_crawler(StartSpider, settings_dict)
    assert connection.from_settings(other.settings) is not clients[0]


def test_from_settings_follows_changed_settings(redis_url):
    settings = Settings({"REDIS_URL": redis_url})
    first = connection.from_settings(settings)
    assert connection.from_settings(settings) is first
    settings.set("REDIS_URL", redis_url.rsplit("/", 1)[0] + "/3")
    changed = connection.from_settings(settings)
    assert changed is not first
    assert changed.connection_pool.connection_kwargs["db"] == 3


# -- 3. metadata, log routes, validation, standalone filter cleanup -------------------------


def test_package_metadata():
    version = re.search(r'VERSION = "([^"]+)"', (ROOT / "setup.py").read_text()).group(1)
    assert scrapy_redis.__version__ == version
    assert isinstance(scrapy_redis.__author__, str) and scrapy_redis.__author__
    assert isinstance(scrapy_redis.__email__, str) and scrapy_redis.__email__
    assert scrapy_redis.get_redis is connection.get_redis
    assert scrapy_redis.get_redis_from_settings is connection.get_redis_from_settings


def test_resuming_crawl_goes_through_spider_log(settings_dict, server, schedulers, caplog):
    first = schedulers({**settings_dict, "SCHEDULER_PERSIST": True})
    for i in range(2):
        first.enqueue_request(Request(f"http://example.com/{i}"))
    first.close("shutdown")
    with caplog.at_level(logging.DEBUG):
        schedulers({**settings_dict, "SCHEDULER_PERSIST": True})
    [record] = [r for r in caplog.records if "Resuming crawl" in r.getMessage()]
    assert record.getMessage() == "Resuming crawl (2 requests scheduled)"
    assert record.name == "demo"  # the spider's logger, as spider.log() writes
    assert record.levelno == logging.INFO  # seen with the quick start's LOG_LEVEL = "INFO"


class LoggingSpider(DemoSpider):
    logged: list = []

    def log(self, message, level=logging.DEBUG, **kw):
        LoggingSpider.logged.append(message)


def test_resuming_crawl_calls_a_spiders_own_or_patched_log(settings_dict, schedulers):
    """Users' tests patch spider.log and assert the call the original made."""
    first = schedulers({**settings_dict, "SCHEDULER_PERSIST": True})
    first.enqueue_request(Request("http://example.com/1"))
    first.close("shutdown")
    crawler = get_crawler(LoggingSpider, {**settings_dict, "SCHEDULER_PERSIST": True})
    scheduler = build_from_crawler(Scheduler, crawler)
    spider = crawler.spider = LoggingSpider.from_crawler(crawler)
    with mock.patch.object(spider, "log", mock.Mock(spec=spider.log)) as patched:
        scheduler.open(spider)
    patched.assert_has_calls([mock.call("Resuming crawl (1 requests scheduled)")])
    scheduler.close("shutdown")
    scheduler.open(spider)  # its own log(), not patched
    assert LoggingSpider.logged == ["Resuming crawl (1 requests scheduled)"]
    scheduler.close("shutdown")


def test_setup_redis_connects_spider_idle_last(settings_dict, server):
    """The original's tests assert the last signals.connect() call is spider_idle's."""
    crawler = get_crawler(StartSpider, settings_dict)
    with mock.patch.object(crawler.signals, "connect") as connect:
        spider = StartSpider.from_crawler(crawler)
    assert connect.call_args == mock.call(spider.spider_idle, signal=signals.spider_idle)


def test_request_to_the_inherited_parse_round_trips(server):
    """A callback that is scrapy.Spider's own parse (the spider defines none) is stored
    by name and rebuilt, as the original's request_from_dict() did."""
    spider = Spider(name="plain")
    queue = FifoQueue(server, spider, "plain:requests")
    request = Request("http://example.com", callback=spider.parse, meta={"foo": "bar"})
    decoded = queue._decode_request(queue._encode_request(request))
    assert decoded.callback == spider.parse
    assert decoded.meta == {"foo": "bar"}


def test_custom_serializer_returning_other_than_bytes(server):
    """A serializer whose dumps() returns what it was given (users' tests do): the round
    trip works, and a decoding failure says why instead of failing in the pickle check."""
    serializer = mock.Mock(dumps=mock.Mock(side_effect=lambda x: x))
    serializer.loads = mock.Mock(side_effect=lambda x: x)
    spider = make_spider()
    queue = FifoQueue(server, spider, "demo:requests", serializer=serializer)
    request = Request("http://example.com", callback=spider.parse)
    assert queue._decode_request(queue._encode_request(request)).url == request.url
    serializer.loads = mock.Mock(side_effect=ValueError("bad entry"))
    with pytest.raises(UndecodableRequestError, match="bad entry"):
        queue._decode_request({"url": "http://example.com", "meta": {}, "priority": 0})


@pytest.mark.parametrize(
    "redis_key, message",
    [("", "redis_key must not be empty"), ([], "redis_key list is empty after normalization")],
)
def test_empty_redis_key_is_refused(settings_dict, redis_key, message):
    crawler = get_crawler(StartSpider, settings_dict)
    with pytest.raises(ValueError, match=message):
        StartSpider.from_crawler(crawler, redis_key=redis_key)


def test_directly_built_dupefilter_close_deletes_its_key(server):
    df = RFPDupeFilter(server, "dupefilter:123")
    df.request_seen(Request("http://example.com"))
    df.close("finished")
    assert not server.exists("dupefilter:123")


def test_subclass_built_standalone_dupefilter_close_deletes_its_key(server):
    df = OwnInitDupeFilter(server, "dupefilter:456", False, 20, 6)
    df.request_seen(Request("http://example.com"))
    df.close("finished")
    assert not server.exists("dupefilter:456")


def test_schedulers_shared_dupefilter_close_keeps_fingerprints(settings_dict, server):
    spider = make_spider(settings_dict)
    df = RFPDupeFilter.from_spider(spider)
    df.request_seen(Request("http://example.com"))
    df.close("finished")
    assert server.scard("demo:dupefilter") == 1


# -- 13. the seen cache does not outlive the data it mirrors --------------------------------


@pytest.fixture
def own_server():
    """A redis-server of this test's own, which it may restart."""
    instance = RedisServer().start()
    yield instance
    instance.cleanup()


def _rolled_back(instance: RedisServer) -> None:
    """Restart ``instance`` from an empty dataset, as after restoring an older RDB."""
    instance.stop()
    (instance.dir / "dump.rdb").unlink(missing_ok=True)
    instance.start()


def _pushed(scheduler, url: str) -> bool:
    """Enqueue ``url`` and send it; whether a request came out of the shared queue."""
    scheduler.enqueue_request(Request(url))
    scheduler.send_enqueued()
    return scheduler.next_request() is not None


def test_seen_cache_dropped_when_the_server_restarts_with_less_data(own_server, schedulers):
    """The client reconnects on its own (REDIS_PARAMS' retry): no outage is seen, yet the
    fingerprint set lost what the cache remembers."""
    settings = {"REDIS_URL": own_server.url, "SCHEDULER_PERSIST": True}
    scheduler = schedulers(settings)
    assert _pushed(scheduler, "http://example.com/a")
    assert not _pushed(scheduler, "http://example.com/a")  # a duplicate
    _rolled_back(own_server)
    assert scheduler.next_request() is None  # the engine asks for work: the queue is empty
    assert _pushed(scheduler, "http://example.com/a"), "dropped by the stale seen cache"


class UnhookedClient:
    """Builds plain clients but is no redis.Redis subclass: its connections are not
    hooked, so the server's identity is never read (as with a custom REDIS_PARAMS
    redis_cls)."""

    from_url = staticmethod(redis.Redis.from_url)


def test_seen_cache_dropped_at_outage_recovery(own_server, schedulers):
    settings = {
        "REDIS_URL": own_server.url,
        "SCHEDULER_PERSIST": True,
        "SCHEDULER_ENQUEUE_DELAY": 0,
        "REDIS_PARAMS": {"redis_cls": f"{__name__}.UnhookedClient"},
    }
    scheduler = schedulers(settings)
    assert _pushed(scheduler, "http://example.com/a")
    own_server.stop()
    assert scheduler.enqueue_request(Request("http://example.com/b"))  # kept: Redis is down
    (own_server.dir / "dump.rdb").unlink(missing_ok=True)
    own_server.start()
    deadline = time.monotonic() + 10
    while not scheduler.send_enqueued():  # until the guard's back-off lets it try again
        assert time.monotonic() < deadline
        time.sleep(0.1)
    urls = []
    while (request := scheduler.next_request()) is not None:
        urls.append(request.url)
    assert urls == ["http://example.com/b"]
    assert _pushed(scheduler, "http://example.com/a"), "dropped by the stale seen cache"


def test_server_identity_counts_changes(own_server):
    client = connection.from_settings(Settings({"REDIS_URL": own_server.url}))
    identity = connection.server_identity(client)
    client.ping()
    before = identity.changes
    client.ping()
    assert identity.changes == before  # the same connection, the same server
    own_server.stop()
    own_server.start()
    client.ping()  # reconnects
    assert identity.changes == before + 1


def test_server_identity_of_a_client_it_did_not_build():
    assert connection.server_identity(redis.Redis()).changes == 0


def test_client_works_for_a_user_denied_info(own_server):
    """An ACL user may not run INFO: connections still work; each new one counts as a
    change (the cache cannot tell the server stayed the same)."""
    admin = redis.Redis.from_url(own_server.url)
    admin.acl_setuser("crawler", enabled=True, passwords=["+pw"], keys=["~*"],
                      channels=["*"], commands=["+@all", "-info"])  # fmt: skip
    url = own_server.url.replace("redis://", "redis://crawler:pw@")
    client = connection.from_settings(Settings({"REDIS_URL": url}))
    assert client.set("k", "v") and client.get("k") == b"v"
    identity = connection.server_identity(client)
    assert identity.changes == 1
    client.connection_pool.disconnect()
    assert client.get("k") == b"v"
    assert identity.changes == 2
    admin.close()
