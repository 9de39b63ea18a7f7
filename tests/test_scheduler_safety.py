"""Shared data a worker must never lose or bring back: flush, failed opens, outages at close,
keys of the wrong type, undecodable entries and requests that kill every worker."""

from __future__ import annotations

import logging
import pickle
import time
from typing import Any

import pytest
import redis
from scrapy import Request
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from helpers import DemoSpider, leased_entries, open_scheduler
from redis_server import RedisServer
from scrapy_redis.exceptions import ConfigurationError, WrongKeyTypeError
from scrapy_redis.outage import outage_guard
from scrapy_redis.scheduler import Scheduler


def test_flush_deletes_leases_so_a_dead_workers_requests_never_come_back(
    settings_dict, server, schedulers
):
    settings = {**settings_dict, "SCHEDULER_WORKER_TIMEOUT": 0.3}
    dead = schedulers(settings)
    for n in range(3):
        dead.enqueue_request(Request(f"http://example.com/{n}"))
    assert dead.next_request() is not None  # leases the three: then it dies
    assert leased_entries(server) == 3
    schedulers(settings).flush()
    assert server.keys("demo:requests*") == [b"demo:requests:workers"]  # they still run
    time.sleep(0.35)  # the dead worker's lease would have expired by now
    late = schedulers(settings)  # opening recovers expired leases
    assert late.next_request() is None
    assert len(late.queue) == 0
    assert late.stats.get_value("scheduler/leases/recovered") is None


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("SCHEDULER_QUEUE_CLASS", "scrapy_redis.queue.FifoQueu"),
        ("SCHEDULER_QUEUE_CLASS", "scrapy_redis.no_such_module.FifoQueue"),
        ("DUPEFILTER_CLASS", "scrapy_redis.dupefilter.RFPDupeFiltre"),
    ],
)
def test_a_typo_in_a_class_setting_names_the_setting(settings_dict, server, setting, value):
    crawler = get_crawler(DemoSpider, {**settings_dict, setting: value})
    spider = crawler._create_spider()
    with pytest.raises(ConfigurationError, match=f"{setting} = '{value}' cannot be loaded"):
        scheduler = build_from_crawler(Scheduler, crawler)
        scheduler.open(spider)


def test_a_worker_whose_open_failed_never_deletes_shared_data(settings_dict, server):
    server.sadd("demo:dupefilter", "f" * 40)
    server.lpush("demo:requests:prio:0", b"entry")
    server.zadd("demo:requests", {"0": 0})
    crawler = get_crawler(
        DemoSpider, {**settings_dict, "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueu"}
    )
    spider = crawler._create_spider()
    scheduler = build_from_crawler(Scheduler, crawler)
    with pytest.raises(Exception, match="SCHEDULER_QUEUE_CLASS|FifoQueu"):
        scheduler.open(spider)
    scheduler.close("shutdown")  # what Scrapy's engine does next: no error, nothing deleted
    assert server.smembers("demo:dupefilter") == {b"f" * 40}
    assert server.lrange("demo:requests:prio:0", 0, -1) == [b"entry"]


@pytest.fixture
def own_server():
    server = RedisServer().start()
    yield server
    server.cleanup()


def test_close_during_an_outage_does_not_claim_redis_is_back(own_server, caplog):
    crawler = get_crawler(DemoSpider, {"REDIS_URL": own_server.url, "SCHEDULER_PERSIST": True})
    spider = crawler._create_spider()
    scheduler = build_from_crawler(Scheduler, crawler)
    scheduler.open(spider)
    recoveries: list[Any] = []
    outage_guard(crawler).on_recovery(lambda: recoveries.append(1))
    own_server.stop()
    with caplog.at_level(logging.INFO):
        assert scheduler.next_request() is None  # the outage starts
        scheduler.close("shutdown")
    assert "Redis is unreachable" in caplog.text
    assert "reachable again" not in caplog.text
    assert recoveries == []


def persistent_server() -> RedisServer:
    return RedisServer("--appendonly", "yes").start()


def test_wrong_serializer_halt_gives_back_what_it_leased_even_if_redis_fails_then():
    own = persistent_server()
    try:
        crawler = get_crawler(
            DemoSpider,
            {
                "REDIS_URL": own.url,
                "SCHEDULER_PERSIST": True,
                "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueue",
            },
        )
        spider = crawler._create_spider()
        scheduler = build_from_crawler(Scheduler, crawler)
        scheduler.open(spider)
        scheduler.enqueue_request(Request("http://example.com/first"))
        assert scheduler.send_enqueued()
        scheduler.server.lpush("demo:requests", pickle.dumps({"url": "x"}, protocol=5))
        scheduler.enqueue_request(Request("http://example.com/last"))
        assert scheduler.send_enqueued()
        assert scheduler.next_request().url == "http://example.com/first"  # leases all 3
        own.stop()  # Redis fails just when the pickled entry halts the worker
        assert scheduler.next_request() is None
        own.start()
        outage_guard(crawler).succeeded()  # no waiting for the back-off
        scheduler.close("scheduler_serializer_error")
        client = redis.Redis.from_url(own.url)
        assert leased_entries(client) == 0  # nothing left to expire later
        assert client.llen("demo:requests") == 3  # all back, the pickled entry untouched
    finally:
        own.cleanup()


class CommandLog:
    """The commands clients send to ``server`` (MONITOR), those run by scripts apart."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.monitor = server.monitor()
        self.monitor.__enter__()

    def stop(self) -> list[dict[str, Any]]:
        self.server.echo("end-of-command-log")
        commands = []
        while True:
            command = self.monitor.next_command()
            if command["command"] == "ECHO end-of-command-log":
                break
            commands.append(command)
        self.monitor.__exit__(None, None, None)
        return commands


def test_setting_an_undecodable_entry_aside_is_one_script_call(settings_dict, server, schedulers):
    scheduler = schedulers({**settings_dict, "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueue"})
    server.lpush("demo:requests", b"\xc1 not a request")
    scheduler.enqueue_request(Request("http://example.com/ok"))
    assert scheduler.send_enqueued()
    log = CommandLog(server)
    assert scheduler.next_request().url == "http://example.com/ok"
    commands = log.stop()
    sent = [c["command"].split()[0].upper() for c in commands if c["client_type"] != "lua"]
    by_scripts = [c["command"].split()[0].upper() for c in commands if c["client_type"] == "lua"]
    # The move is one script call (EVALSHA, or EVAL the first time), no command of its own.
    assert set(sent) <= {"EVALSHA", "EVAL", "HELLO"}
    assert by_scripts.count("RPUSH") == 1
    assert server.lrange("demo:requests:invalid", 0, -1) == [b"\xc1 not a request"]
    assert leased_entries(server) == 1  # the request handed out, in progress
    assert scheduler.stats.get_value("scheduler/invalid/redis") == 1


@pytest.mark.parametrize(
    ("key", "setting", "queue_cls"),
    [
        ("demo:requests", "SCHEDULER_QUEUE_KEY", "scrapy_redis.queue.PriorityQueue"),
        ("demo:requests", "SCHEDULER_QUEUE_KEY", "scrapy_redis.queue.FifoQueue"),
        ("demo:requests:leases", "SCHEDULER_QUEUE_KEY", "scrapy_redis.queue.FifoQueue"),
        ("demo:dupefilter", "SCHEDULER_DUPEFILTER_KEY", "scrapy_redis.queue.LifoQueue"),
    ],
)
def test_a_key_of_another_type_is_one_clear_error_at_start(
    settings_dict, server, key, setting, queue_cls
):
    server.set(key, "written by hand")
    with pytest.raises(WrongKeyTypeError) as error:
        open_scheduler({**settings_dict, "SCHEDULER_QUEUE_CLASS": queue_cls})
    message = str(error.value)
    assert f"Redis key '{key}' holds a string" in message
    assert setting in message and f"UNLINK '{key}'" in message
    assert server.get(key) == b"written by hand"


def test_a_key_changing_type_during_the_crawl_stops_the_worker_once(
    settings_dict, server, schedulers, caplog
):
    scheduler = schedulers(settings_dict)
    scheduler.enqueue_request(Request("http://example.com/a"))
    assert scheduler.send_enqueued()
    server.delete("demo:requests")
    server.set("demo:requests", "written by hand")
    with caplog.at_level(logging.ERROR, logger="scrapy_redis.scheduler"):
        for _ in range(3):
            assert scheduler.next_request() is None
        assert scheduler.enqueue_request(Request("http://example.com/b")) is True
        assert not scheduler.has_pending_requests()
        scheduler.close("redis_wrong_type")
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    named = [e for e in errors if "Redis key 'demo:requests' holds a string" in e]
    assert len(named) == 1 and "Closing the spider" in named[0], errors
    assert not [r for r in caplog.records if r.exc_info], "no traceback"
    # What was accepted after that could not be pushed, and is said to be lost.
    assert errors[1:] == [f"1 requests could not be pushed to Redis: {errors[1].split(': ', 1)[1]}"]
    assert server.get("demo:requests") == b"written by hand"
