"""Start messages, multi-key reading and idle behaviour of the Redis spiders."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from scrapy import FormRequest, Request, signals
from scrapy.exceptions import DontCloseSpider
from scrapy.utils.test import get_crawler

from scrapy_redis.exceptions import InvalidStartMessageError
from scrapy_redis.scheduling.workers import crawler_worker_id
from scrapy_redis.spiders import RedisCrawlSpider, RedisSpider, normalize_redis_key
from scrapy_redis.start.messages import parse_message, request_from_message


class MySpider(RedisSpider):
    name = "myspider"

    def parse(self, response):  # pragma: no cover
        return None

    def parse_item(self, response):  # pragma: no cover
        return None

    def _parse_private(self, response):  # pragma: no cover
        return None


class MyCrawlSpider(RedisCrawlSpider):
    name = "mycrawler"


def make(settings: dict, spidercls=MySpider, **kwargs):
    crawler = get_crawler(spidercls, settings)
    spider = spidercls.from_crawler(crawler, **kwargs)
    crawler.spider = spider
    return spider


@pytest.fixture
def spider(settings_dict, server):
    return make(settings_dict)


def urls(requests):
    return [request.url for request in requests]


# -- messages ----------------------------------------------------------------------------


def test_bare_url(spider):
    request = spider.make_request_from_data(b"https://example.com/a")
    assert type(request) is Request
    assert (request.url, request.method, request.dont_filter) == (
        "https://example.com/a",
        "GET",
        True,  # start requests are not filtered, as in the original
    )


def test_full_json_message(spider):
    message = {
        "url": "https://example.com/p",
        "method": "post",
        "meta": {"job": "1"},
        "headers": {"X-Token": "t"},
        "body": "raw",
        "cb_kwargs": {"page": 2},
        "priority": 7,
        "dont_filter": True,
        "callback": "parse_item",
        "errback": "parse",
    }
    request = spider.make_request_from_data(json.dumps(message).encode())
    assert request.method == "POST"
    assert request.body == b"raw"
    assert request.meta["job"] == "1"
    assert request.headers["X-Token"] == b"t"
    assert request.cb_kwargs == {"page": 2}
    assert request.priority == 7
    assert request.dont_filter is True
    assert request.callback == spider.parse_item
    assert request.errback == spider.parse


def test_extra_string_keys_are_form_data_as_in_the_original(spider):
    request = spider.make_request_from_data(
        json.dumps(
            {"url": "https://example.com/p", "method": "post", "a": "1", "b": ["x", "y"]}
        ).encode()
    )
    assert isinstance(request, FormRequest)
    assert request.body == b"a=1&b=x&b=y"
    get = spider.make_request_from_data(
        json.dumps({"url": "https://example.com", "meta": {"job-id": "123"}, "k": "v"}).encode()
    )
    assert get.url == "https://example.com/?k=v"
    assert get.meta["job-id"] == "123"


def test_null_values_mean_not_given(settings_dict, server):
    spider = make({**settings_dict, "REDIS_START_URLS_DONT_FILTER": True})
    message = {
        "url": "https://example.com/n",
        "method": None,
        "formdata": None,
        "dont_filter": None,
        "meta": None,
    }
    request = spider.make_request_from_data(json.dumps(message).encode())
    assert (request.method, request.dont_filter, type(request)) == ("GET", True, Request)


def test_negative_batch_size_rejected(settings_dict, server):
    with pytest.raises(ValueError, match="redis_batch_size must be positive"):
        make(settings_dict, redis_batch_size="-1")


def test_formdata_key(spider):
    request = spider.make_request_from_data(
        json.dumps(
            {"url": "https://example.com/s", "method": "POST", "formdata": {"q": "x"}}
        ).encode()
    )
    assert request.body == b"q=x"


@pytest.mark.parametrize(
    "data, reason",
    [
        ("", "empty"),
        ("{not json", "invalid JSON"),
        ("123", "not an object"),
        ('"https://example.com"', "not an object"),
        ("[1, 2]", "not an object"),
        ('{"meta": {}}', "no 'url'"),
        ('{"url": null}', "no 'url'"),
        ('{"url": "https://example.com", "page": 1}', "unknown key 'page'"),
        ('{"url": "https://example.com", "meta": []}', "'meta' must be dict"),
        ('{"url": "https://example.com", "priority": "high"}', "'priority' must be int"),
        ('{"url": "https://example.com", "callback": "nope"}', "no method 'nope'"),
        ('{"url": "https://example.com", "callback": "_private"}', "no method"),
        ('{"url": "no-scheme"}', "Missing scheme"),
        ('{"url": "https://e.com", "body": "x", "a": "1"}', "both 'body' and form data"),
    ],
)
def test_malformed_messages(spider, data, reason):
    with pytest.raises(InvalidStartMessageError, match=reason):
        request_from_message(parse_message(data), spider)


# -- batches -----------------------------------------------------------------------------


def test_poison_message_does_not_drop_its_batch(spider, server, caplog):
    server.rpush(
        "myspider:start_urls",
        "https://example.com/1",
        "123",
        '{"url": "https://example.com/2", "page": 1}',
        "https://example.com/3",
    )
    with caplog.at_level(logging.WARNING):
        requests = spider.next_requests()
    assert urls(requests) == ["https://example.com/1", "https://example.com/3"]
    assert server.llen("myspider:start_urls") == 0
    stats = spider.crawler.stats
    assert stats.get_value("redis/start_messages/invalid") == 2
    assert stats.get_value("redis/start_messages/read") == 4
    assert caplog.text.count("Skipping start message") == 2


def test_batch_size_setting(settings_dict, server):
    spider = make({**settings_dict, "REDIS_START_URLS_BATCH_SIZE": 2})
    server.rpush("myspider:start_urls", *[f"https://example.com/{i}" for i in range(5)])
    assert urls(spider.next_requests()) == ["https://example.com/0", "https://example.com/1"]
    assert server.llen("myspider:start_urls") == 3


def test_batch_size_defaults_to_concurrent_requests(settings_dict, server):
    spider = make({**settings_dict, "CONCURRENT_REQUESTS": 3})
    assert spider.redis_batch_size == 3


def test_spider_arguments_override_settings(settings_dict, server):
    spider = make(settings_dict, redis_key="jobs:%(name)s", redis_batch_size="4", max_idle_time="7")
    assert spider.redis_key == "jobs:myspider"
    assert spider.redis_batch_size == 4
    assert spider.max_idle_time == 7


def test_invalid_batch_size(settings_dict, server):
    with pytest.raises(ValueError, match="redis_batch_size must be an integer"):
        make(settings_dict, redis_batch_size="many")


def test_set_mode(settings_dict, server):
    server.delete("myspider:start_urls")
    spider = make({**settings_dict, "REDIS_START_URLS_AS_SET": True})
    server.sadd("myspider:start_urls", "https://example.com/a", "https://example.com/b")
    assert sorted(urls(spider.next_requests())) == [
        "https://example.com/a",
        "https://example.com/b",
    ]


def test_zset_mode_highest_score_first(settings_dict, server):
    spider = make({**settings_dict, "REDIS_START_URLS_AS_ZSET": True, "CONCURRENT_REQUESTS": 2})
    server.zadd(
        "myspider:start_urls",
        {"https://example.com/lo": 1, "https://example.com/hi": 9, "https://example.com/mid": 5},
    )
    assert urls(spider.next_requests()) == ["https://example.com/hi", "https://example.com/mid"]


def test_normalize_redis_key():
    assert normalize_redis_key(["a:%(name)s", " b ", "a:%(name)s"], "s") == ["a:s", "b"]
    with pytest.raises(ValueError, match="empty"):
        normalize_redis_key("  ", "s")
    with pytest.raises(ValueError):
        normalize_redis_key(["a", ""], "s")
    with pytest.raises(ValueError, match="empty after normalization"):
        normalize_redis_key([], "s")


def test_multi_key_drains_current_key_then_next_non_empty(settings_dict, server):
    spider = make({**settings_dict, "CONCURRENT_REQUESTS": 2}, redis_key=["high", "low"])
    server.rpush(
        "low", "https://example.com/l1", "https://example.com/l2", "https://example.com/l3"
    )
    assert urls(spider.next_requests()) == ["https://example.com/l1", "https://example.com/l2"]
    server.rpush("high", "https://example.com/h1")
    # no check interval: the current key is drained first
    assert urls(spider.next_requests()) == ["https://example.com/l3"]
    assert urls(spider.next_requests()) == ["https://example.com/h1"]
    assert spider.next_requests() == []


def test_multi_key_check_interval_preempts(settings_dict, server):
    spider = make(
        {**settings_dict, "CONCURRENT_REQUESTS": 1, "REDIS_KEY_CHECK_INTERVAL": 0.01},
        redis_key=["high", "low"],
    )
    server.rpush("low", "https://example.com/l1", "https://example.com/l2")
    assert urls(spider.next_requests()) == ["https://example.com/l1"]
    server.rpush("high", "https://example.com/h1")
    import time

    time.sleep(0.02)
    assert urls(spider.next_requests()) == ["https://example.com/h1"]


def test_async_start_and_start_requests(spider, server):
    server.rpush("myspider:start_urls", "https://example.com/a", "https://example.com/b")

    async def collect():
        return [request async for request in spider.start()]

    assert urls(asyncio.run(collect())) == ["https://example.com/a", "https://example.com/b"]
    server.rpush("myspider:start_urls", "https://example.com/c")
    assert urls(spider.start_requests()) == ["https://example.com/c"]


def test_crawl_spider_variant(settings_dict, server):
    spider = make(settings_dict, MyCrawlSpider)
    server.rpush("mycrawler:start_urls", '{"url": "https://example.com/x"}')
    assert urls(spider.next_requests()) == ["https://example.com/x"]


def test_start_requests_are_not_filtered_unless_the_setting_says_so(settings_dict, server):
    """As in the original, a start request bypasses the duplicate filter, so a URL
    pushed again is crawled again; REDIS_START_URLS_DONT_FILTER = False filters them.
    A message's own "dont_filter" wins over the setting, both ways."""
    default = make(settings_dict)
    filtering = make({**settings_dict, "REDIS_START_URLS_DONT_FILTER": False})
    assert default.make_request_from_data(b"https://example.com").dont_filter is True
    assert filtering.make_request_from_data(b"https://example.com").dont_filter is False
    for dont_filter in (True, False):
        message = json.dumps({"url": "https://example.com", "dont_filter": dont_filter})
        for spider in (default, filtering):
            assert spider.make_request_from_data(message.encode()).dont_filter is dont_filter


def test_make_request_from_data_override(settings_dict, server):
    class Custom(MySpider):
        def make_request_from_data(self, data):
            if data == b"boom":
                raise RuntimeError("boom")
            return [Request(data.decode() + "/1"), Request(data.decode() + "/2")]

    spider = make(settings_dict, Custom)
    server.rpush("myspider:start_urls", "https://example.com", "boom")
    assert urls(spider.next_requests()) == ["https://example.com/1", "https://example.com/2"]


def test_our_message_format_works_under_a_setup_redis_of_its_own(settings_dict, server):
    """A subclass written for the original sets up Redis itself and calls our
    make_request_from_data() from its own next_requests()."""
    from scrapy_redis import connection

    class OwnSetup(MySpider):
        def setup_redis(self, crawler=None):
            self.server = connection.from_settings(crawler.settings)

    for setting, dont_filter in ((True, True), (False, False)):
        spider = make({**settings_dict, "REDIS_START_URLS_DONT_FILTER": setting}, OwnSetup)
        request = spider.make_request_from_data(b'{"url": "https://example.com/o"}')
        assert (request.url, request.dont_filter) == ("https://example.com/o", dont_filter)


# -- idling ------------------------------------------------------------------------------


class FakeEngine:
    """Records crawl() calls; the spider under test only calls crawl()."""

    def __init__(self):
        self.crawled = []

    def crawl(self, request):
        self.crawled.append(request)


def with_engine(spider):
    engine = FakeEngine()
    spider.crawler.engine = engine
    return engine


def test_idle_schedules_messages_and_stays_open(spider, server):
    engine = with_engine(spider)
    server.rpush("myspider:start_urls", "https://example.com/a")
    with pytest.raises(DontCloseSpider):
        spider.spider_idle()
    assert urls(engine.crawled) == ["https://example.com/a"]


def test_idle_without_max_idle_time_never_closes(spider, server):
    with_engine(spider)
    for _ in range(3):
        with pytest.raises(DontCloseSpider):
            spider.spider_idle()


def test_max_idle_time_counts_from_idle_start(settings_dict, server):
    from scrapy_redis.start.idle import IdleTimer

    spider = make({**settings_dict, "MAX_IDLE_TIME_BEFORE_CLOSE": 0.2})
    with_engine(spider)
    # The idle timer's clock, moved by the test: with sleeps and the real clock, two calls
    # meant to be close together may be 0.2 s apart on a loaded machine.
    now = [1000.0]
    spider._idle = IdleTimer(lambda: now[0])
    now[0] += 0.3  # time before the first idle event does not count
    with pytest.raises(DontCloseSpider):
        spider.spider_idle()
    assert spider.spider_idle_start_time is not None
    now[0] += 0.25
    spider.spider_idle()  # closes: no DontCloseSpider
    server.rpush("myspider:start_urls", "https://example.com/a")
    with pytest.raises(DontCloseSpider):
        spider.spider_idle()  # work resets the idle clock
    now[0] += 0.1
    with pytest.raises(DontCloseSpider):
        spider.spider_idle()


# -- leases ------------------------------------------------------------------------------


def test_start_messages_are_leased_until_scheduled(spider, server):
    engine = with_engine(spider)
    server.rpush("myspider:start_urls", "https://example.com/a", "https://example.com/b")
    requests = spider.next_requests()
    assert server.hlen("myspider:start_urls:leases") == 2  # popped, not yet scheduled
    # under the crawler's worker id, the one its scheduler registers (scrapy redis status)
    owner = crawler_worker_id(spider.crawler)
    assert all(
        f.decode().startswith(f"{owner}:") for f in server.hkeys("myspider:start_urls:leases")
    )
    for request in requests:
        engine.crawl(request)
    spider.schedule_next_requests()  # the next read releases the consumed batch
    assert server.hlen("myspider:start_urls:leases") == 0
    assert server.zcard("myspider:start_urls:lease_deadlines") == 0


def test_dead_workers_start_messages_are_recovered(settings_dict, server):
    from helpers import expire_leases

    settings = settings_dict
    dead, live = make(settings), make(settings)
    server.rpush("myspider:start_urls", "https://example.com/a", "https://example.com/b")
    assert urls(dead.next_requests()) == ["https://example.com/a", "https://example.com/b"]
    assert expire_leases(server) == 2  # the dead worker never scheduled them, nor renewed
    live.redis_start_messages.beat()  # the live worker's heartbeat
    assert live.crawler.stats.get_value("redis/start_messages/recovered") == 2
    assert urls(live.next_requests()) == ["https://example.com/a", "https://example.com/b"]


def test_zset_and_set_messages_go_back_where_they_came_from(settings_dict, server):
    spider = make({**settings_dict, "REDIS_START_URLS_AS_ZSET": True})
    server.zadd("myspider:start_urls", {"https://example.com/hi": 9})
    spider.next_requests()
    spider.redis_start_messages.give_back()  # spider closed before scheduling them
    assert server.zscore("myspider:start_urls", "https://example.com/hi") == 9
    server.delete("myspider:start_urls")
    spider = make({**settings_dict, "REDIS_START_URLS_AS_SET": True})
    server.sadd("myspider:start_urls", "https://example.com/s")
    spider.next_requests()
    spider.redis_start_messages.give_back()
    assert server.sismember("myspider:start_urls", "https://example.com/s")


def test_closing_gives_back_the_start_messages_and_stops_the_loops(settings_dict, server):
    """Through Scrapy's signals, as a crawl sends them (Scrapy's extensions left out)."""
    spider = make({**settings_dict, "REDIS_START_URLS_AS_ZSET": True, "EXTENSIONS_BASE": {}})
    crawler_signals = spider.crawler.signals
    crawler_signals.send_catch_log(signals.spider_opened, spider=spider)
    server.zadd("myspider:start_urls", {"https://example.com/hi": 9})
    assert urls(spider.next_requests()) == ["https://example.com/hi"]
    assert server.zcard("myspider:start_urls") == 0
    results = crawler_signals.send_catch_log(
        signals.spider_closed, spider=spider, reason="finished"
    )
    assert [failure for _, failure in results if failure is not None] == []
    assert server.zscore("myspider:start_urls", "https://example.com/hi") == 9
    assert server.hlen("myspider:start_urls:leases") == 0


def test_a_retried_start_message_pop_answers_what_the_first_one_leased(server):
    """redis-py resends a command whose reply was lost: the retry must not pop more."""
    from scrapy_redis.store.scripts import script

    server.rpush("start", *[f"https://example.com/{i}" for i in range(5)])
    keys = ["start:leases", "start:lease_deadlines", "other", "start"]
    args = ["list", 3, 0, 60000, "w:", 1]
    first = script("pop_start_messages")(server, keys, args)
    again = script("pop_start_messages")(server, keys, args)  # the same call, sent again
    assert (
        first
        == again
        == [2, b"https://example.com/0", b"https://example.com/1", b"https://example.com/2"]
    )
    assert server.llen("start") == 2 and server.hlen("start:leases") == 3


# -- untrusted messages: callbacks and log lines -------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "_parse_private",
        "__init__",
        "_stop_polling",
        "setup_redis",
        "redis_start_messages",
        "log",
        "close",
        "from_crawler",
        "name",
        "logger",
    ],
)
def test_callback_must_be_a_public_method_of_the_spider(spider, name):
    """The rule of queue entries (test_queue.py): a method of the spider's own classes,
    bound to it (not Scrapy's Spider's, not scrapy-redis's, not static or class methods,
    not other attributes), and no private name."""
    for field in ("callback", "errback"):
        message = json.dumps({"url": "https://example.com", field: name})
        with pytest.raises(InvalidStartMessageError, match="no method"):
            request_from_message(parse_message(message), spider)


HUGE = 1024 * 1024


@pytest.mark.parametrize(
    "message",
    [
        "x" * HUGE,  # no scheme: Scrapy's error quotes the URL
        json.dumps({"url": "https://example.com", "priority": "9" * HUGE}),
        json.dumps({"url": "https://example.com", "callback": "p" * HUGE}),
        json.dumps({"url": "https://example.com", "page": [1] * (HUGE // 3)}),
        "{" + "x" * HUGE,
        b"\xff" * HUGE,
    ],
    ids=["url", "type", "callback", "form", "json", "encoding"],
)
def test_a_huge_rejected_message_logs_a_short_line(spider, server, caplog, message):
    server.rpush("myspider:start_urls", message)
    with caplog.at_level(logging.DEBUG):
        assert spider.next_requests() == []
    [line] = [r.getMessage() for r in caplog.records if "Skipping start message" in r.getMessage()]
    assert len(line) < 1500, line[:3000]
    assert f"({HUGE}" in line or f"({len(message)}" in line  # says how long the whole was
    assert max(len(r.getMessage()) for r in caplog.records) < 1500


# -- start requests and the duplicate filter ------------------------------------------


class FilteringEngine(FakeEngine):
    """An engine whose scheduler drops every request it was told to (as a duplicate)."""

    def __init__(self, crawler, drop):
        super().__init__()
        self.crawler, self.drop = crawler, drop

    def crawl(self, request):
        super().crawl(request)
        if request.url in self.drop:
            self.crawler.signals.send_catch_log(
                signals.request_dropped, request=request, spider=self.crawler.spider
            )


def test_filtered_start_requests_are_counted_at_info_once_per_batch(settings_dict, server, caplog):
    spider = make({**settings_dict, "REDIS_START_URLS_DONT_FILTER": False})
    drop = {"https://example.com/1", "https://example.com/2", "https://example.com/other"}
    spider.crawler.engine = FilteringEngine(spider.crawler, drop)
    server.rpush("myspider:start_urls", *(f"https://example.com/{i}" for i in range(4)))
    with caplog.at_level(logging.INFO, logger="scrapy_redis"):
        assert spider.schedule_next_requests() == 4
        # a request the spider did not make from a start message is not counted
        spider.crawler.engine.crawl(Request("https://example.com/other"))
        assert spider.schedule_next_requests() == 0
    lines = [r for r in caplog.records if "start requests" in r.getMessage().lower()]
    assert [(r.levelno, r.getMessage()) for r in lines] == [
        (
            logging.INFO,
            "Start requests filtered as duplicates of requests seen before: 2 "
            "(see REDIS_START_URLS_DONT_FILTER)",
        )
    ]
    assert spider.crawler.stats.get_value("redis/start_requests/filtered") == 2
