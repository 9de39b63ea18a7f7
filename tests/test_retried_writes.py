"""Writes that redis-py sends again after losing their reply are applied once.

The default REDIS_PARAMS retry a command once when its reply does not come (the
connection drops, or the server stalls longer than ``socket_timeout``). The
server ran the first copy: a write that is not idempotent would be applied
twice. A proxy in front of the test server loses one reply for real.
"""

from __future__ import annotations

import json
import logging
import time

import pytest
from scrapy import Request
from scrapy.utils.test import get_crawler
from twisted.internet.task import Clock

from helpers import DemoSpider, ManualClock, make_spider, until_stored
from lossy_proxy import LossyProxy
from redis_server import RedisServer
from scrapy_redis.connection import get_redis_from_settings
from scrapy_redis.pipelines import RedisPipeline
from scrapy_redis.queue import Candidate, Entry, FifoQueue, LifoQueue, PriorityQueue

LOSSES = ["drop", "stall"]


@pytest.fixture
def proxy(redis_server):
    proxy = LossyProxy(redis_server.port)
    yield proxy
    proxy.close()


def crawler_settings(proxy: LossyProxy, **extra):
    # A short socket_timeout: a "stall" loss costs the test half a second.
    return {"REDIS_URL": proxy.url, "REDIS_PARAMS": {"socket_timeout": 0.5}, **extra}


def pipeline(settings) -> RedisPipeline:
    crawler = get_crawler(DemoSpider, settings)
    crawler.spider = crawler.spidercls.from_crawler(crawler)
    return RedisPipeline.from_crawler(crawler)


def stats_collector(settings):
    crawler = get_crawler(
        DemoSpider, {**settings, "STATS_CLASS": "scrapy_redis.stats.RedisStatsCollector"}
    )
    return crawler.stats


def stored_items(server, key="demo:items") -> list[int]:
    return [json.loads(raw)["n"] for raw in server.lrange(key, 0, -1)]


@pytest.mark.parametrize("how", LOSSES)
def test_an_item_whose_reply_is_lost_is_stored_once(proxy, server, how):
    pipe = pipeline(crawler_settings(proxy))
    pipe.process_item({"n": 1})
    proxy.lose_next_reply(how)
    pipe.process_item({"n": 2})
    assert proxy.lost  # the reply was lost, the command sent again
    assert stored_items(server) == [1, 2]


def test_items_sent_again_after_an_outage_are_stored_once(proxy, server):
    pipe = pipeline(crawler_settings(proxy))
    pipe.process_item({"n": 1})
    proxy.lose_next_reply(times=2)  # the reply to redis-py's retry too: an outage
    pipe.process_item({"n": 2})  # stored, but the pipeline cannot know it
    # The retry's reply is lost too (or the reply to the INFO a new connection sends to
    # check the server's identity, see connection.py): an outage.
    assert proxy.lost[0] == b"EVALSHA" and len(proxy.lost) == 2 and pipe.guard.down
    pipe.process_item({"n": 3})  # kept in memory (backing off)
    pipe.close_spider()  # pushes what it kept: 2 again, then 3
    assert stored_items(server) == [1, 2, 3]
    assert server.keys("*:writes:*") == []  # its record is deleted when it closes


@pytest.mark.parametrize("how", LOSSES)
def test_a_batch_of_items_whose_reply_is_lost_is_stored_once_in_order(proxy, server, how):
    pipe = pipeline(crawler_settings(proxy))
    pipe.clock = Clock()  # items wait and go in batches (no reactor runs here)
    until_stored(pipe.process_item({"n": 0}))
    pipe.flush()  # connected: the reply lost is the batch's, not the handshake's
    answers = []
    for n in range(1, 6):
        answers.append(until_stored(pipe.process_item({"n": n})))
    proxy.lose_next_reply(how)
    pipe.clock.advance(pipe.delay)
    assert proxy.lost == [b"EVALSHA"]  # the reply was lost, the batch sent again
    assert stored_items(server) == [0, 1, 2, 3, 4, 5]
    assert [answer.result["n"] for answer in answers] == [1, 2, 3, 4, 5]


def test_a_batch_of_items_sent_again_after_an_outage_is_stored_once(proxy, server):
    pipe = pipeline(crawler_settings(proxy))
    pipe.clock = Clock()
    until_stored(pipe.process_item({"n": 0}))
    pipe.flush()
    answers = []
    for n in range(1, 4):
        answers.append(until_stored(pipe.process_item({"n": n})))
    proxy.lose_next_reply(times=2)  # the reply to redis-py's retry too: an outage
    pipe.clock.advance(pipe.delay)  # stored, but the pipeline cannot know it
    assert pipe.guard.down and stored_items(server) == [0, 1, 2, 3]
    assert not any(answer.called for answer in answers)  # not known to be stored
    answers.append(until_stored(pipe.process_item({"n": 4})))  # kept (backing off)
    pipe.close_spider()  # pushes what it kept: 1 to 3 again, then 4
    assert stored_items(server) == [0, 1, 2, 3, 4]
    assert [answer.result["n"] for answer in answers] == [1, 2, 3, 4]


@pytest.mark.parametrize("how", LOSSES)
def test_an_increment_whose_reply_is_lost_is_added_once(proxy, server, how):
    stats = stats_collector(crawler_settings(proxy, STATS_FLUSH_INTERVAL=0))
    stats.inc_value("pages", 1)
    proxy.lose_next_reply(how)
    stats.inc_value("pages", 5)
    assert proxy.lost
    assert server.hget("demo:stats", "pages") == b"6"


def test_buffered_updates_whose_reply_is_lost_are_written_once(proxy, server):
    settings = crawler_settings(proxy, SCHEDULER_PERSIST=True, STATS_DUMP=False)
    stats = stats_collector(settings)
    stats.inc_value("pages", 5)
    stats.inc_value("ratio", 0.5)
    stats.inc_value("started", 1, start=10)
    stats.max_value("max", 3)
    stats.set_value("reason", "x")
    stats.server.ping()  # connected: the reply lost is the write's, not the handshake's
    proxy.lose_next_reply()
    stats.close_spider(reason="finished")  # writes the buffered updates
    assert proxy.lost == [b"EVALSHA"]
    assert server.hgetall("demo:stats") == {
        b"pages": b"5",
        b"ratio": b"0.5",
        b"started": b"11",
        b"max": b"3",
        b"reason": b"x",
    }


def test_updates_sent_again_after_an_outage_are_written_once(proxy, server):
    settings = crawler_settings(
        proxy, STATS_FLUSH_INTERVAL=0, SCHEDULER_PERSIST=True, STATS_DUMP=False
    )
    stats = stats_collector(settings)
    stats.inc_value("pages", 1)
    proxy.lose_next_reply(times=2)  # the reply to redis-py's retry too: an outage
    stats.inc_value("pages", 5)  # written, but the collector cannot know it
    assert proxy.lost[0] == b"EVALSHA" and len(proxy.lost) == 2  # an outage (see above)
    stats.inc_value("pages", 2)  # kept in memory (backing off)
    stats.close_spider(reason="finished")  # writes what it kept: +5 again, then +2
    assert server.hget("demo:stats", "pages") == b"8"
    assert server.keys("*:writes:*") == []  # its record is deleted when it closes


def test_an_update_redis_refuses_is_logged_and_the_others_written(settings_dict, server, caplog):
    server.hset("demo:stats", "name", "text")
    stats = stats_collector({**settings_dict, "STATS_FLUSH_INTERVAL": 0})
    with caplog.at_level("ERROR"):
        stats.set_value("a", 1)
        stats.inc_value("name")  # not a number: refused
        stats.inc_value("b")
    assert "Redis refused updates of stats in demo:stats:\nname: " in caplog.text
    stored = server.hgetall("demo:stats")
    stored.pop(b"log_count/ERROR", None)  # that error, counted where Scrapy counts logs
    assert stored == {b"name": b"text", b"a": b"1", b"b": b"1"}


@pytest.mark.parametrize("queue_cls", [FifoQueue, LifoQueue, PriorityQueue])
@pytest.mark.parametrize("how", LOSSES)
def test_a_pushed_batch_whose_reply_is_lost_is_not_reported_as_duplicates(
    proxy, server, queue_cls, how
):
    client = get_redis_from_settings(get_crawler(settings_dict=crawler_settings(proxy)).settings)
    queue = queue_cls(client, make_spider(), "q")
    candidates = [Candidate(f"fp{i}", Entry(f"r{i}".encode())) for i in range(3)]
    queue.push_new([Candidate("first", None)], "seen")  # the script is loaded: runs by SHA
    proxy.lose_next_reply(how)
    assert queue.push_new([*candidates, candidates[0]], "seen") == [True, True, True, False]
    assert proxy.lost == [b"EVALSHA"]
    assert len(queue) == 3 and server.scard("seen") == 4
    # Sent again later (not a retry): duplicates.
    assert queue.push_new(candidates, "seen") == [False, False, False]
    assert len(queue) == 3


def test_a_scheduled_request_whose_reply_is_lost_is_not_dropped(proxy, server, schedulers):
    scheduler = schedulers(crawler_settings(proxy, SCHEDULER_ENQUEUE_DELAY=0))
    dropped = []
    scheduler.crawler.signals.connect(
        lambda request, spider: dropped.append(request), "request_dropped"
    )
    scheduler.enqueue_request(Request("https://example.com/"))  # the script is loaded
    proxy.lose_next_reply()
    assert scheduler.enqueue_request(Request("https://example.com/a")) is True
    assert proxy.lost == [b"EVALSHA"]
    assert scheduler.stats.get_value("dupefilter/filtered") is None and not dropped
    assert scheduler.stats.get_value("scheduler/enqueued/redis") == 2


def test_a_batch_sent_again_after_an_outage_is_not_reported_as_duplicates(
    proxy, server, schedulers
):
    scheduler = schedulers(crawler_settings(proxy, SCHEDULER_ENQUEUE_DELAY=0))
    dropped = []
    scheduler.crawler.signals.connect(
        lambda request, spider: dropped.append(request), "request_dropped"
    )
    scheduler.enqueue_request(Request("https://example.com/"))  # the script is loaded
    proxy.lose_next_reply(times=2)  # the reply to redis-py's retry too: an outage
    assert scheduler.enqueue_request(Request("https://example.com/a")) is True  # pushed
    assert proxy.lost[0] == b"EVALSHA" and len(proxy.lost) == 2  # an outage (see above)
    assert scheduler.enqueue_request(Request("https://example.com/b")) is True  # kept
    time.sleep(0.6)  # the guard's first back-off
    assert scheduler.send_enqueued()  # a again (answered as the first time), then b
    assert scheduler.stats.get_value("dupefilter/filtered") is None and not dropped
    assert scheduler.stats.get_value("scheduler/enqueued/redis") == 3
    urls = sorted(scheduler.next_request().url for _ in range(3))
    assert urls == ["https://example.com/", "https://example.com/a", "https://example.com/b"]
    assert scheduler.next_request() is None
    assert server.keys("*:writes:*") != []
    scheduler.close("finished")
    assert server.keys("*:writes:*") == []  # its records are deleted when it closes


@pytest.fixture
def own_server():
    """A redis-server of this test only, so that it can be stopped and started."""
    server = RedisServer().start()
    yield server
    server.cleanup()


def test_items_kept_during_an_outage_are_pushed_once_when_the_pipeline_sees_redis_back(
    own_server,
):
    """The pipeline is the first component to reach Redis again: its own recovery
    callback must not push the items it is pushing a second time."""
    pipe = pipeline({"REDIS_URL": own_server.url})
    own_server.stop()
    for n in range(3):
        pipe.process_item({"n": n})  # kept in memory
    assert pipe.guard.down
    own_server.start()
    time.sleep(pipe.guard.FIRST_BACKOFF + 0.1)  # the guard tries Redis again
    pipe.process_item({"n": 3})
    assert not pipe.guard.down
    assert stored_items(pipe.server) == [0, 1, 2, 3]


def test_items_waiting_through_a_long_outage_are_given_back_so_the_crawl_can_close(
    own_server, caplog
):
    """Scrapy's engine closes a spider only once every item it handed over came back:
    after REDIS_OUTAGE_TIMEOUT (the scheduler closes the spider), waiting items are
    given back unstored, and logged as lost when the pipeline closes."""
    pipe = pipeline({"REDIS_URL": own_server.url, "REDIS_OUTAGE_TIMEOUT": 30})
    pipe.clock, pipe.guard.clock = Clock(), ManualClock()
    own_server.stop()
    answer = until_stored(pipe.process_item({"n": 1}))
    pipe.clock.advance(pipe.delay)  # the push fails: an outage
    assert pipe.guard.down and not answer.called
    pipe.guard.clock.advance(31)
    pipe.clock.advance(pipe.delay)
    assert answer.result == {"n": 1}
    pipe.close_spider()
    assert "1 items could not be stored" in caplog.text


def test_the_record_key_is_in_the_slot_of_the_key_it_guards():
    from redis.crc import key_slot

    from scrapy_redis.store.keys import writes_key

    for data_key in ["demo:items", "{demo}:requests", "demo:{x}:stats", "a{b"]:
        record = writes_key(data_key, "host:1:abcd")
        assert key_slot(record.encode()) == key_slot(data_key.encode()), record
    assert writes_key("demo:items", "w") == "{demo:items}:writes:w"
    assert writes_key("{demo}:requests", "w") == "{demo}:requests:writes:w"


@pytest.mark.parametrize(("timeout", "ttl"), [(300, 600), (5, 60), (float("inf"), 86400)], ids=str)
def test_records_outlive_the_outage_timeout(timeout, ttl):
    from scrapy.settings import Settings

    from scrapy_redis.store.writes import WriteIds, writes_ttl

    assert writes_ttl(Settings({"REDIS_OUTAGE_TIMEOUT": timeout})) == ttl
    assert WriteIds(writes_ttl(Settings({"REDIS_OUTAGE_TIMEOUT": timeout}))).ttl_ms == ttl * 1000


@pytest.mark.parametrize("how", LOSSES)
def test_a_fingerprint_whose_reply_is_lost_is_not_taken_for_a_duplicate(proxy, server, how):
    """The duplicate filter under Scrapy's own scheduler (or a queue class of your own):
    ``request_seen()`` sent again must not find the fingerprint its first copy added."""
    from scrapy_redis.dupefilter import RFPDupeFilter

    crawler = get_crawler(DemoSpider, crawler_settings(proxy))
    dupefilter = RFPDupeFilter.from_crawler(crawler)
    assert dupefilter.request_seen(Request("https://example.com/")) is False  # loads scripts
    proxy.lose_next_reply(how)
    assert dupefilter.request_seen(Request("https://example.com/a")) is False
    assert proxy.lost
    assert dupefilter.request_seen(Request("https://example.com/a")) is True
    dupefilter.close("finished")
    assert server.keys("*") == []  # its one-time key and its write record are deleted


def test_a_fingerprint_sent_again_after_an_outage_is_not_taken_for_a_duplicate(proxy, server):
    import redis

    from scrapy_redis.dupefilter import RFPDupeFilter

    crawler = get_crawler(DemoSpider, crawler_settings(proxy))
    dupefilter = RFPDupeFilter.from_crawler(crawler)
    assert dupefilter.request_seen(Request("https://example.com/")) is False  # loads scripts
    proxy.lose_next_reply(times=2)  # the retry's too: the call fails (an outage)
    with pytest.raises((redis.ConnectionError, redis.TimeoutError)):
        dupefilter.request_seen(Request("https://example.com/a"))
    # Sent again when Redis answers (as the scheduler does): the first copy was applied.
    assert dupefilter.request_seen(Request("https://example.com/a")) is False
    assert dupefilter.request_seen(Request("https://example.com/a")) is True


def test_stats_logged_while_the_stats_are_written_are_written_too(proxy, server, caplog):
    """Scrapy counts log lines in the stats: the outage's lines, logged while a write is
    under way, are counted and written, not re-entering it and not left over at close."""
    settings = crawler_settings(
        proxy, STATS_FLUSH_INTERVAL=0, SCHEDULER_PERSIST=True, STATS_DUMP=False
    )
    stats = stats_collector(settings)
    stats.inc_value("pages", 1)

    class Counts(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            stats.inc_value(f"logged/{record.levelname}")

    handler, outage_logger = Counts(), logging.getLogger("scrapy_redis.store.outage")
    outage_logger.addHandler(handler)
    try:
        proxy.lose_next_reply(times=2)  # the reply to redis-py's retry too: an outage
        stats.inc_value("pages", 5)  # "Redis is unreachable": logged, counted, kept
        stats.close_spider(reason="finished")  # "Redis is reachable again": logged too
    finally:
        outage_logger.removeHandler(handler)
    assert server.hget("demo:stats", "pages") == b"6"
    assert server.hget("demo:stats", "logged/WARNING") == b"2"
    assert "are lost" not in caplog.text
    assert server.keys("*:writes:*") == []
