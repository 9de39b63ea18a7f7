"""Redis restarted under a running scheduler, spider, pipeline and stats collector."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from scrapy import Request
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler
from twisted.internet.task import Clock

from helpers import DemoSpider, guard_clock
from redis_server import RedisServer
from scrapy_redis.pipelines import RedisPipeline
from scrapy_redis.scheduler import Scheduler
from scrapy_redis.store.outage import OutageGuard


@pytest.fixture
def own_server():
    """A redis-server of this test only (appendonly), so that it can be restarted."""
    server = RedisServer("--appendonly", "yes").start()
    yield server
    server.cleanup()


def restart(server: RedisServer) -> None:
    server.stop()  # SIGTERM: redis-server flushes its AOF and exits
    server.start()


def open_scheduler_on(own_server: RedisServer, reactor: Any = None, **settings: Any) -> Scheduler:
    """A scheduler opened on ``own_server`` (persistent), as Scrapy's engine opens it;
    its timers on ``reactor`` if given."""
    crawler = get_crawler(
        DemoSpider, {"REDIS_URL": own_server.url, "SCHEDULER_PERSIST": True, **settings}
    )
    spider = crawler.spidercls.from_crawler(crawler)
    crawler.spider = spider
    scheduler = build_from_crawler(Scheduler, crawler)
    if reactor is not None:
        scheduler.reactor = reactor
    scheduler.open(spider)
    return scheduler


def test_scheduler_pipeline_and_stats_survive_a_restart(own_server, caplog):
    scheduler = open_scheduler_on(own_server, STATS_CLASS="scrapy_redis.stats.RedisStatsCollector")
    crawler = scheduler.crawler
    clock = guard_clock(scheduler)
    pipeline = RedisPipeline.from_crawler(crawler)
    stats = crawler.stats
    scheduler.enqueue_request(Request("http://example.com/before"))
    stats.inc_value("pages", 2)

    own_server.stop()
    with caplog.at_level(logging.WARNING):
        assert scheduler.enqueue_request(Request("http://example.com/during")) is True
        assert scheduler.enqueue_request(Request("http://example.com/during")) is True
        assert scheduler.next_request() is None
        assert scheduler.has_pending_requests()  # do not close: wait for Redis
        for n in range(3):
            pipeline.process_item({"n": n})
        stats.inc_value("pages", 3)
        stats.set_value("reason", "x")
        stats.max_value("max", 7)
        assert stats.get_value("pages") == 5  # 2 still buffered + 3: what this worker knows
        assert stats.get_worker_value("pages") == 5  # its own stats go on in memory
    assert caplog.text.count("Redis is unreachable") == 1  # once per outage

    own_server.start()
    clock.advance(OutageGuard.MAX_BACKOFF)  # skip the rest of the back-off
    with caplog.at_level(logging.WARNING):
        first = scheduler.next_request()
        # The end of the outage makes the pipeline write its items at once, before
        # the scheduler acknowledges the requests that produced them.
        assert scheduler.server.llen("demo:items") == 3
        second = scheduler.next_request()
        assert scheduler.next_request() is None
    assert "Redis is reachable again" in caplog.text
    assert {first.url, second.url} == {"http://example.com/before", "http://example.com/during"}
    pipeline.process_item({"n": 3})
    stats.inc_value("pages")
    client = scheduler.server
    assert [int(item[6:-1]) for item in client.lrange("demo:items", 0, -1)] == [0, 1, 2, 3]
    assert stats.get_stats() == {**stats.get_stats(), "pages": 6, "reason": "x", "max": 7}
    assert stats.get_value("scheduler/enqueued/redis") == 2  # the duplicate was filtered
    stats.close_spider(reason="finished")  # writes what is buffered (persist: kept)
    own = client.hgetall(f"demo:stats:worker:{scheduler.worker_id}")
    assert (own[b"pages"], own[b"reason"], own[b"max"]) == (b"6", b"x", b"7")
    scheduler.close("finished")


def test_leases_survive_a_restart(own_server):
    scheduler = open_scheduler_on(own_server)
    scheduler.enqueue_request(Request("http://example.com/a"))
    assert scheduler.next_request().url == "http://example.com/a"
    restart(own_server)
    assert scheduler.server.hlen("demo:requests:leases") == 1  # acknowledged writes persist
    scheduler.close("shutdown")
    assert scheduler.server.llen("demo:requests:prio:0") == 1  # returned at once


def test_outage_guard_backs_off_and_expires():
    now = [0.0]
    guard = OutageGuard(timeout=10, clock=lambda: now[0])
    assert guard.may_try()
    guard.failed(ConnectionError("down"))
    assert guard.down and not guard.may_try()
    now[0] = 0.5
    assert guard.may_try()
    guard.failed(ConnectionError("down"))
    now[0] = 1.4
    assert not guard.may_try()  # 1 s after the second failure
    now[0] = 11
    assert guard.expired()
    guard.succeeded()
    assert not guard.down and guard.may_try()


def test_the_outage_is_backing_off_when_its_start_is_logged():
    """A log handler may call Redis (Scrapy counts log lines in the stats, which a
    RedisStatsCollector writes): when the outage's first line is logged, the guard is
    already backing off, so that call is not tried (and does not log again)."""
    now = [0.0]
    guard = OutageGuard(timeout=10, clock=lambda: now[0])
    seen: list[bool] = []

    class Asks(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(guard.may_try())

    handler = Asks()
    logging.getLogger("scrapy_redis.store.outage").addHandler(handler)
    try:
        guard.failed(ConnectionError("down"))
    finally:
        logging.getLogger("scrapy_redis.store.outage").removeHandler(handler)
    assert seen == [False]


def fifo_scheduler_with_a_bad_entry(
    own_server: RedisServer, reactor: Any = None
) -> tuple[Scheduler, Any]:
    """A FifoQueue scheduler whose queue holds a request, then an undecodable entry."""
    scheduler = open_scheduler_on(
        own_server, reactor, SCHEDULER_QUEUE_CLASS="scrapy_redis.queue.FifoQueue"
    )
    scheduler.enqueue_request(Request("http://example.com/1"))
    scheduler.send_enqueued()
    scheduler.server.lpush("demo:requests", b"\xc1\xff\xff")
    return scheduler, scheduler.server


def test_undecodable_entry_met_during_an_outage_is_set_aside_later(own_server):
    clock = Clock()
    scheduler, client = fifo_scheduler_with_a_bad_entry(own_server, clock)  # /1, then the bad one
    scheduler.enqueue_request(Request("http://example.com/2"))
    scheduler.send_enqueued()
    assert scheduler.next_request().url == "http://example.com/1"  # one pop took all 3

    own_server.stop()
    second = scheduler.next_request()  # the bad entry cannot be moved: it waits
    assert second.url == "http://example.com/2"
    assert scheduler.stats.get_value("scheduler/invalid/redis") is None
    own_server.start()
    time.sleep(0.6)  # the outage back-off
    clock.advance(scheduler.worker_timeout / 3)  # the heartbeat
    assert scheduler.stats.get_value("scheduler/invalid/redis") == 1
    assert client.lrange("demo:requests:invalid", 0, -1) == [b"\xc1\xff\xff"]
    scheduler.close("shutdown")  # the two requests were never done: back to the queue
    assert scheduler.stats.get_value("scheduler/leases/returned") == 2
    assert not client.exists("demo:requests:leases")
    assert client.llen("demo:requests") == 2


def test_undecodable_entry_given_back_when_closing_during_the_outage(own_server):
    scheduler, client = fifo_scheduler_with_a_bad_entry(own_server)
    assert scheduler.next_request().url == "http://example.com/1"
    own_server.stop()
    assert scheduler.next_request() is None
    own_server.start()
    time.sleep(0.6)
    scheduler.close("shutdown")  # the entry goes back to the queue, nothing stays leased
    assert not client.exists("demo:requests:leases")
    assert client.lrange("demo:requests", 0, -1)[0] == b"\xc1\xff\xff"  # popped after /1
