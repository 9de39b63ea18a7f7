"""The shared stats hash and the items pipeline."""

from __future__ import annotations

import json
import multiprocessing
from datetime import datetime, timezone

import pytest
from scrapy.extensions.logstats import LogStats
from scrapy.utils.test import get_crawler
from twisted.internet import task

from helpers import Calls, DemoSpider, until_stored
from scrapy_redis.pipelines import RedisPipeline
from scrapy_redis.stats import RedisStatsCollector, decode_value, encode_value


def stats_crawler(settings_dict, **extra):
    crawler = get_crawler(
        DemoSpider,
        {**settings_dict, **extra, "STATS_CLASS": "scrapy_redis.stats.RedisStatsCollector"},
    )
    assert isinstance(crawler.stats, RedisStatsCollector)
    return crawler


def stats_collector(settings_dict, **extra):
    return stats_crawler(settings_dict, **extra).stats


def stats_on_clock(settings_dict, **extra):
    """A collector whose flush timer runs on a task.Clock, and the clock."""
    clock = task.Clock()
    return RedisStatsCollector(stats_crawler(settings_dict, **extra), clock=clock), clock


@pytest.mark.parametrize(
    "value",
    [
        0,
        7,
        -3,
        2.5,
        1e-9,
        "finished",
        "123",
        "1.5",
        "json:x",
        "2026-01-01T00:00:00",
        "",
        True,
        False,
        None,
        [1, "a"],
        {"k": [1]},
        datetime(2026, 11, 21, 20, 0, 1, 123456, tzinfo=timezone.utc),
    ],
)
def test_values_keep_their_type(value):
    decoded = decode_value(encode_value(value).encode())
    assert decoded == value
    assert type(decoded) is type(value)


def test_legacy_values_are_read(settings_dict, server):
    server.hset("demo:stats", mapping={"start_time": b"1704164645.0", "n": b"3"})
    stats = stats_collector(settings_dict)
    assert stats.get_value("start_time") == 1704164645.0
    assert stats.get_stats() == {"start_time": 1704164645.0, "n": 3}


def test_basic_operations(settings_dict, server):
    stats = stats_collector(settings_dict)
    stats.set_value("reason", "finished")
    stats.inc_value("count")
    stats.inc_value("count", 2)
    stats.inc_value("started", 1, start=10)
    stats.inc_value("ratio", 0.5)
    stats.inc_value("ratio", 1)  # an int increment of a float stat
    stats.max_value("max", 3)
    stats.max_value("max", 1)
    stats.min_value("min", 3)
    stats.min_value("min", 1)
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    stats.min_value("first", when)
    stats.min_value("first", datetime(2027, 1, 1, tzinfo=timezone.utc))
    assert stats.get_stats() == {
        "reason": "finished",
        "count": 3,
        "started": 11,
        "ratio": 1.5,
        "max": 3,
        "min": 1,
        "first": when,
    }
    assert stats.get_value("missing", "d") == "d"
    stats.set_stats({"a": 1})
    assert stats.get_stats() == {"a": 1}
    stats.clear_stats()
    assert not server.exists("demo:stats")


def _increment(url, times, flush):
    from helpers import ensure_reactor

    ensure_reactor()
    stats = stats_collector({"REDIS_URL": url, "SCHEDULER_PERSIST": True}, **flush)
    for _ in range(times):
        stats.inc_value("hits")
        stats.inc_value("started", start=100)
        stats.max_value("max", times)
    stats.close_spider(reason="finished")  # writes what is still buffered


@pytest.mark.parametrize("flush", [{}, {"STATS_FLUSH_INTERVAL": 0}], ids=["buffered", "unbuffered"])
def test_concurrent_increments_are_not_lost(server, redis_url, flush):
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_increment, args=(redis_url, 300, flush)) for _ in range(4)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(60)
        assert process.exitcode == 0
    assert int(server.hget("demo:stats", "hits")) == 1200
    assert int(server.hget("demo:stats", "started")) == 1300
    assert int(server.hget("demo:stats", "max")) == 300


def test_updates_are_merged_and_written_in_one_round_trip(settings_dict, server):
    stats, clock = stats_on_clock(settings_dict)
    server.hset("demo:stats", "ratio", "0.5")  # a float: HINCRBY fails, HINCRBYFLOAT then
    calls = Calls(server, "multi", "exec", "evalsha", "eval")
    for _ in range(50):
        stats.inc_value("pages")
        stats.inc_value("ratio")
        stats.max_value("max", 3)
    stats.set_value("reason", "x")
    stats.inc_value("started", start=10)
    assert sum(calls().values()) == 0 and not server.hexists("demo:stats", "pages")
    assert stats.get_value("pages") == 50 and stats.get_value("ratio") == 50.5
    [flush] = clock.getDelayedCalls()
    assert flush.active()
    clock.advance(stats.flush_interval)  # STATS_FLUSH_INTERVAL later
    sent = calls()
    assert sent["evalsha"] + sent["eval"] == 1 and sent["multi"] == 0  # one script call
    assert stats.get_stats() == {
        "pages": 50,
        "ratio": 50.5,
        "max": 3,
        "reason": "x",
        "started": 11,
    }
    assert decode_value(server.hget("demo:stats", "pages")) == 50


def test_updates_written_at_once_without_a_flush_interval(settings_dict, server):
    stats, clock = stats_on_clock(settings_dict, STATS_FLUSH_INTERVAL=0)
    stats.inc_value("pages", 2)
    assert server.hget("demo:stats", "pages") == b"2"
    assert clock.getDelayedCalls() == []  # no flush timer


def test_logstats_and_dump_work(settings_dict, server, caplog):
    crawler = stats_crawler(settings_dict)
    stats = crawler.stats
    stats.set_value("start_time", datetime(2026, 1, 1, 10, 0, tzinfo=timezone.utc))
    stats.inc_value("item_scraped_count", 5)
    stats.inc_value("response_received_count", 9)
    logstats = LogStats.from_crawler(crawler)
    stats.set_value("finish_time", datetime(2026, 1, 1, 10, 2, tzinfo=timezone.utc))
    logstats.spider_closed(
        crawler.spidercls.from_crawler(crawler), "finished"
    )  # crashed the original
    assert stats.get_value("items_per_minute") == 2.5
    assert stats.get_value("responses_per_minute") == 4.5
    import logging

    with caplog.at_level(logging.INFO):
        stats.close_spider(reason="finished")
    assert "Dumping Scrapy stats" in caplog.text
    assert "'item_scraped_count': 5" in caplog.text
    assert not server.exists("demo:stats")  # not persisted, no scheduler: original behaviour


def test_persist_keeps_stats(settings_dict, server):
    stats = stats_collector(settings_dict, SCHEDULER_PERSIST=True)
    stats.inc_value("x")
    stats.close_spider(reason="finished")
    assert server.exists("demo:stats")


def pipeline(settings_dict, **extra):
    crawler = get_crawler(DemoSpider, {**settings_dict, **extra})
    crawler.spider = crawler.spidercls.from_crawler(crawler)
    return RedisPipeline.from_crawler(crawler)


def test_pipeline_pushes_items_in_order(settings_dict, server):
    pipe = pipeline(settings_dict)
    items = [{"n": i, "name": "café"} for i in range(20)]
    for item in items:
        assert pipe.process_item(item) is item
    stored = server.lrange("demo:items", 0, -1)
    assert [json.loads(raw) for raw in stored] == items
    assert stored[0] == b'{"n": 0, "name": "caf\\u00e9"}'  # the original's JSON format


def batching_pipeline(settings_dict, **extra):
    """A pipeline that batches items, its timer on a Clock (no reactor runs here)."""
    pipe = pipeline(settings_dict, **extra)
    pipe.clock = task.Clock()
    return pipe


def test_pipeline_pushes_items_in_batches_in_order(settings_dict, server):
    pipe = batching_pipeline(settings_dict, REDIS_ITEMS_BATCH_SIZE=100, REDIS_ITEMS_DELAY=0.5)
    calls = Calls(server, "evalsha")
    items = [{"n": i} for i in range(250)]
    answers = [until_stored(pipe.process_item(item)) for item in items]
    # Two full batches went at once; the last 50 wait for the timer.
    assert calls() == {"evalsha": 2}
    assert [json.loads(raw)["n"] for raw in server.lrange("demo:items", 0, -1)] == list(range(200))
    given_back = [answer.result for answer in answers[:200]]  # fired: stored
    assert given_back == items[:200]
    assert not any(answer.called for answer in answers[200:])  # not in Redis yet
    pipe.clock.advance(0.5)
    assert calls() == {"evalsha": 1}
    assert [json.loads(raw) for raw in server.lrange("demo:items", 0, -1)] == items
    assert [answer.result for answer in answers[200:]] == items[200:]


def test_items_waiting_are_pushed_by_flush_and_at_close(settings_dict, server):
    pipe = batching_pipeline(settings_dict)
    first = until_stored(pipe.process_item({"n": 1}))
    pipe.flush()
    assert first.result == {"n": 1} and server.llen("demo:items") == 1
    last = until_stored(pipe.process_item({"n": 2}))
    pipe.close_spider()
    assert last.result == {"n": 2} and server.llen("demo:items") == 2
    assert server.keys("*:writes:*") == []


def test_a_batch_redis_refuses_fails_its_items_and_not_the_next(settings_dict, server):
    server.set("demo:items", "not a list")
    pipe = batching_pipeline(settings_dict)
    refused = until_stored(pipe.process_item({"n": 1}))
    pipe.clock.advance(pipe.delay)  # the timer's push fails: WRONGTYPE
    assert "WRONGTYPE" in str(refused.result.value)
    refused.addErrback(lambda _: None)
    server.delete("demo:items")
    stored = until_stored(pipe.process_item({"n": 2}))
    pipe.clock.advance(pipe.delay)
    assert stored.result == {"n": 2}
    assert server.lrange("demo:items", 0, -1) == [b'{"n": 2}']


def test_a_batch_is_no_larger_than_the_items_scrapy_awaits_at_once(settings_dict, server):
    """Scrapy processes at most CONCURRENT_ITEMS items of a response at once: a larger
    batch would never fill from one response and wait for its delay every time."""
    pipe = batching_pipeline(settings_dict, CONCURRENT_ITEMS=10, REDIS_ITEMS_BATCH_SIZE=100)
    answers = [until_stored(pipe.process_item({"n": n})) for n in range(10)]
    assert all(answer.called for answer in answers) and server.llen("demo:items") == 10


@pytest.mark.parametrize(
    ("name", "value"), [("REDIS_ITEMS_BATCH_SIZE", 0), ("REDIS_ITEMS_DELAY", -1)]
)
def test_pipeline_batching_settings_are_checked(settings_dict, name, value):
    with pytest.raises(ValueError, match=name):
        pipeline(settings_dict, **{name: value})


def test_pipeline_settings_and_item_key_override(settings_dict, server):
    class ByType(RedisPipeline):
        def item_key(self, item, spider):
            return f"{spider.name}:{item['type']}"

    pipe = pipeline(
        settings_dict, REDIS_ITEMS_KEY="out:%(spider)s", REDIS_ITEMS_SERIALIZER="json.dumps"
    )
    pipe.process_item({"a": 1})
    assert server.lrange("out:demo", 0, -1) == [b'{"a": 1}']
    typed = ByType.from_crawler(pipe.crawler)
    typed.process_item({"type": "book"})
    assert server.llen("demo:book") == 1


def test_the_dump_of_a_huge_shared_value_is_short(settings_dict, server, caplog):
    import logging

    stats = stats_collector(settings_dict, STATS_FLUSH_INTERVAL=0)
    server.hset("demo:stats", "x" * 10**6, "written by hand")  # anyone can write the hash
    stats.set_value("finish_reason", "y" * 10**6)
    with caplog.at_level(logging.INFO):
        stats.close_spider(reason="finished")
    dumps = [r.getMessage() for r in caplog.records if "Dumping" in r.getMessage()]
    assert len(dumps) == 2  # this worker's stats, then the fleet's
    assert all(len(dump) < 2000 and "characters)" in dump for dump in dumps)


def test_set_stats_replaces_a_hash_of_many_stats(settings_dict, server):
    """stats_replace.lua sets the fields in calls of 1,000: Lua 5.1's unpack() refuses
    8,000 values (7,998 a call failed from 3,999 stats on)."""
    stats = stats_collector(settings_dict)
    many = {f"field/{n}": n for n in range(4000)}
    stats.set_stats(many)
    assert stats.get_stats() == many
    assert server.hlen("demo:stats") == 4000
