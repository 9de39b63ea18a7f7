"""Each worker's own stats beside the fleet's totals (RedisStatsCollector)."""

from __future__ import annotations

import logging

import pytest
from scrapy.utils.test import get_crawler
from twisted.internet import task

from helpers import DemoSpider, open_scheduler
from lossy_proxy import LossyProxy
from scrapy_redis.exceptions import ConfigurationError
from scrapy_redis.logstats import LogStats
from scrapy_redis.scheduling.workers import crawler_worker_id
from scrapy_redis.stats import RATES_REFRESH, RedisStatsCollector, decode_value

STATS = "scrapy_redis.stats.RedisStatsCollector"


def worker(settings_dict, clock=None, **extra):
    """The stats collector of one worker (its own crawler), its timers on ``clock``."""
    crawler = get_crawler(DemoSpider, {**settings_dict, "STATS_CLASS": STATS, **extra})
    if clock is None:
        return crawler.stats
    return RedisStatsCollector(crawler, clock=clock)


def worker_hash(server, stats) -> dict[str, object]:
    raw = server.hgetall(f"demo:stats:worker:{stats.worker_id}")
    return {name.decode(): decode_value(value) for name, value in raw.items()}


def test_two_workers_fleet_totals_add_up_and_each_keeps_its_own(settings_dict, server):
    first = worker(settings_dict, STATS_FLUSH_INTERVAL=0)
    second = worker(settings_dict, STATS_FLUSH_INTERVAL=0)
    assert first.worker_id != second.worker_id
    first.inc_value("response_received_count", 3)
    second.inc_value("response_received_count", 5)
    first.max_value("max", 7)
    second.max_value("max", 2)
    second.set_value("reason", "b")
    for stats in (first, second):  # the fleet's totals, whoever asks
        assert stats.get_value("response_received_count") == 8
        assert stats.get_stats() == {"response_received_count": 8, "max": 7, "reason": "b"}
    assert first.get_worker_stats() == {"response_received_count": 3, "max": 7}
    assert second.get_worker_stats() == {"response_received_count": 5, "max": 2, "reason": "b"}
    assert first.get_worker_value("reason", "none") == "none"
    assert second.get_worker_value("max") == 2

    now = float(server.time()[0])
    for stats in (first, second):
        stored = worker_hash(server, stats)
        assert {k: v for k, v in stored.items() if not k.startswith("worker/")} == (
            stats.get_worker_stats()
        )
        assert abs(stored["worker/updated_at"] - now) < 5
        assert stored["worker/pages_per_second"] > 0
        assert stored["worker/items_per_second"] == 0
        ttl = server.pttl(f"demo:stats:worker:{stats.worker_id}")
        assert 86_000_000 < ttl <= 86_400_000  # STATS_WORKER_TTL: a day
    listed = {member.decode() for member in server.zrange("demo:stats:workers", 0, -1)}
    assert listed == {first.worker_id, second.worker_id}
    assert server.pttl("demo:stats:workers") > 86_000_000


def test_the_worker_id_is_the_one_the_scheduler_registers(settings_dict, server):
    scheduler = open_scheduler({**settings_dict, "STATS_CLASS": STATS, "STATS_FLUSH_INTERVAL": 0})
    stats = scheduler.crawler.stats
    assert stats.worker_id == scheduler.worker_id == crawler_worker_id(scheduler.crawler)
    assert server.hexists("demo:requests:workers", stats.worker_id)
    stats.inc_value("pages")
    assert worker_hash(server, stats)["pages"] == 1
    scheduler.close("finished")


def test_the_hash_expires_after_stats_worker_ttl(settings_dict, server):
    stats = worker(settings_dict, STATS_FLUSH_INTERVAL=0, STATS_WORKER_TTL=30)
    stats.inc_value("pages")
    assert 25_000 < server.pttl(f"demo:stats:worker:{stats.worker_id}") <= 30_000
    with pytest.raises(ConfigurationError, match="STATS_WORKER_TTL"):
        worker(settings_dict, STATS_WORKER_TTL=0)


def test_a_lost_hash_is_written_whole_again(settings_dict, server):
    stats = worker(settings_dict, STATS_FLUSH_INTERVAL=0)
    stats.inc_value("pages", 4)
    stats.set_value("reason", "x")
    server.unlink(f"demo:stats:worker:{stats.worker_id}")  # expired, or deleted by hand
    stats.inc_value("items")
    stored = worker_hash(server, stats)
    assert (stored["pages"], stored["reason"], stored["items"]) == (4, "x", 1)


def test_set_stats_and_clear_stats_cover_the_workers_hashes(settings_dict, server):
    first = worker(settings_dict, STATS_FLUSH_INTERVAL=0)
    second = worker(settings_dict, STATS_FLUSH_INTERVAL=0)
    first.inc_value("pages", 2)
    first.set_value("old", 1)
    second.inc_value("pages", 3)
    first.set_stats({"pages": 10})
    assert first.get_stats() == {"pages": 10} and first.get_worker_stats() == {"pages": 10}
    stored = worker_hash(server, first)
    assert {k: v for k, v in stored.items() if not k.startswith("worker/")} == {"pages": 10}
    second.clear_stats()  # any worker: the fleet's hash and every worker's
    assert server.keys("demo:stats*") == []
    assert second.get_worker_stats() == {}


def test_the_last_worker_deletes_every_worker_hash_at_close(settings_dict, server):
    first = worker(settings_dict, STATS_FLUSH_INTERVAL=0, SCHEDULER_PERSIST=True)
    second = worker(settings_dict, STATS_FLUSH_INTERVAL=0)
    first.inc_value("pages")
    first.close_spider(reason="finished")  # kept (persist): its hash stays
    assert server.exists(f"demo:stats:worker:{first.worker_id}")
    second.inc_value("pages")
    second.close_spider(reason="finished")  # no scheduler: clears, as the original did
    assert server.keys("demo:stats*") == []


def test_the_dump_names_this_worker_and_the_fleet(settings_dict, server, caplog):
    first = worker(settings_dict, STATS_FLUSH_INTERVAL=0, SCHEDULER_PERSIST=True)
    second = worker(settings_dict, STATS_FLUSH_INTERVAL=0, SCHEDULER_PERSIST=True)
    first.inc_value("response_received_count", 2)
    second.inc_value("response_received_count", 3)
    with caplog.at_level(logging.INFO):
        first.close_spider(reason="finished")
    own, fleet = [r.getMessage() for r in caplog.records if "Dumping" in r.getMessage()]
    assert own == "Dumping Scrapy stats:\n{'response_received_count': 2}"  # Scrapy's header
    assert fleet == (
        f"Dumping the fleet's stats (demo:stats; this worker: {first.worker_id}):\n"
        "{'response_received_count': 5}"
    )


def test_rates_over_the_last_minute_and_falling_to_zero(settings_dict, server):
    clock = task.Clock()
    stats = worker(settings_dict, clock, STATS_FLUSH_INTERVAL=1)
    stats.open_spider()  # at 0 s

    def rates():
        stored = worker_hash(server, stats)
        return stored["worker/pages_per_second"], stored["worker/items_per_second"]

    for _ in range(30):  # 2 pages and 1 item a second for 30 s
        stats.inc_value("response_received_count", 2)
        stats.inc_value("item_scraped_count")
        clock.advance(1)
    assert rates() == (2.0, 1.0)
    clock.advance(RATES_REFRESH)  # nothing crawled: the rates are written again, lower
    pages, items = rates()
    assert 1.5 < pages < 2.0 and 0.75 < items < 1.0
    for _ in range(20):
        clock.advance(RATES_REFRESH)
    assert rates() == (0.0, 0.0)
    assert clock.getDelayedCalls() == []  # at 0: no more writes


def test_a_write_sent_again_after_a_lost_reply_is_applied_once(redis_server, server):
    proxy = LossyProxy(redis_server.port)
    try:
        settings = {"REDIS_URL": proxy.url, "REDIS_PARAMS": {"socket_timeout": 0.5}}
        stats = worker(settings, STATS_FLUSH_INTERVAL=0)
        stats.inc_value("pages", 1)
        proxy.lose_next_reply()  # redis-py sends the script call again
        stats.inc_value("pages", 5)
        assert proxy.lost[0] == b"EVALSHA"
    finally:
        proxy.close()
    assert server.hget("demo:stats", "pages") == b"6"
    assert worker_hash(server, stats)["pages"] == 6
    assert stats.get_worker_value("pages") == 6


def test_logstats_logs_this_worker_and_the_fleet(settings_dict, server, caplog):
    clock = task.Clock()
    first = worker(settings_dict, STATS_FLUSH_INTERVAL=0)
    second = worker(settings_dict, STATS_FLUSH_INTERVAL=0)
    second.inc_value("response_received_count", 1000)  # a crawl already running
    extension = LogStats(first, interval=60, clock=clock)
    with caplog.at_level(logging.INFO, logger="scrapy_redis.logstats"):
        extension.spider_opened(DemoSpider())
        first.inc_value("response_received_count", 30)
        first.inc_value("item_scraped_count", 20)
        second.inc_value("response_received_count", 60)
        clock.advance(60)
    assert caplog.messages[-1] == (
        "Crawled 30 pages (at 30 pages/min), scraped 20 items (at 20 items/min); "
        "fleet: 1090 pages (at 90 pages/min), 20 items (at 20 items/min)"
    )
    from datetime import datetime, timedelta, timezone

    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    first.set_value("start_time", start)
    first.set_value("finish_time", start + timedelta(minutes=2))
    extension.spider_closed(DemoSpider(), "finished")
    assert first.get_worker_value("responses_per_minute") == 15
    assert first.get_worker_value("items_per_minute") == 10
    assert not extension.task.running


def test_no_timer_writes_after_close(settings_dict, server):
    """The last write at close may schedule a refresh of the rates: it is cancelled, so
    a process that runs other crawls after this one does not write the deleted keys
    again."""
    clock = task.Clock()
    stats = worker(settings_dict, clock, STATS_FLUSH_INTERVAL=1)
    stats.open_spider()
    for _ in range(5):  # a rate above 0
        stats.inc_value("response_received_count", 3)
        clock.advance(1)
    stats.set_value("finish_reason", "finished")  # as CoreStats does on spider_closed
    stats.close_spider(reason="finished")  # no scheduler, no persist: deletes its keys
    assert server.keys("*") == []
    assert clock.getDelayedCalls() == []
    clock.advance(120)
    assert server.keys("*") == []
