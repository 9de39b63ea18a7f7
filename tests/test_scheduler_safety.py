"""Shared data a worker must never lose or bring back: flush, failed opens, outages at close,
keys of the wrong type, undecodable entries and requests that kill every worker."""

from __future__ import annotations

import json
import logging
import pickle
import re
import time
from typing import Any

import pytest
import redis
from scrapy import Request
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler
from twisted.internet.task import Clock

from helpers import DemoSpider, dying_worker, expire_leases, leased_entries, open_scheduler
from redis_server import RedisServer
from scrapy_redis.deadletters import dead_letters, requeue_dead_letters
from scrapy_redis.exceptions import ConfigurationError, WrongKeyTypeError
from scrapy_redis.scheduler import Scheduler
from scrapy_redis.store.outage import outage_guard


def test_flush_deletes_leases_so_a_dead_workers_requests_never_come_back(
    settings_dict, server, schedulers
):
    settings = settings_dict
    dying_worker(schedulers, settings)
    assert leased_entries(server) == 3
    schedulers(settings).flush()
    assert server.keys("demo:requests*") == [b"demo:requests:workers"]  # they still run
    assert expire_leases(server) == 0  # no lease left to expire (the dead worker's are gone)
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
    spider = crawler.spidercls.from_crawler(crawler)
    with pytest.raises(ConfigurationError, match=re.escape(f"{setting} = '{value}' cannot")):
        scheduler = build_from_crawler(Scheduler, crawler)
        scheduler.open(spider)


def test_a_worker_whose_open_failed_never_deletes_shared_data(settings_dict, server):
    server.sadd("demo:dupefilter", "f" * 40)
    server.lpush("demo:requests:prio:0", b"entry")
    server.zadd("demo:requests", {"0": 0})
    crawler = get_crawler(
        DemoSpider, {**settings_dict, "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueu"}
    )
    spider = crawler.spidercls.from_crawler(crawler)
    scheduler = build_from_crawler(Scheduler, crawler)
    with pytest.raises(Exception, match=r"SCHEDULER_QUEUE_CLASS|FifoQueu"):
        scheduler.open(spider)
    scheduler.close("shutdown")  # what Scrapy's engine does next: no error, nothing deleted
    assert server.smembers("demo:dupefilter") == {b"f" * 40}
    assert server.lrange("demo:requests:prio:0", 0, -1) == [b"entry"]


def test_a_worker_stopped_by_a_key_of_another_type_at_open_closes_quietly(settings_dict, server):
    # The check of the key types runs before this worker joins the registry: it has
    # nothing to leave at close (and its registry key may be the wrong one).
    server.set("demo:requests:workers", "written by hand")
    crawler = get_crawler(DemoSpider, settings_dict)
    spider = crawler.spidercls.from_crawler(crawler)
    scheduler = build_from_crawler(Scheduler, crawler)
    with pytest.raises(WrongKeyTypeError):
        scheduler.open(spider)
    scheduler.close("shutdown")  # what Scrapy's engine does next: no error
    assert scheduler.cleared_shared_data is None
    assert server.get("demo:requests:workers") == b"written by hand"


@pytest.fixture
def own_server():
    server = RedisServer().start()
    yield server
    server.cleanup()


def test_close_during_an_outage_does_not_claim_redis_is_back(own_server, caplog):
    crawler = get_crawler(DemoSpider, {"REDIS_URL": own_server.url, "SCHEDULER_PERSIST": True})
    spider = crawler.spidercls.from_crawler(crawler)
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
        spider = crawler.spidercls.from_crawler(crawler)
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
    scheduler = schedulers(
        {**settings_dict, "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueue"}
    )
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


@pytest.mark.parametrize(
    "queue_cls", ["scrapy_redis.queue.FifoQueue", "scrapy_redis.queue.PriorityQueue"]
)
def test_a_request_every_worker_dies_with_goes_to_the_dead_letters(
    settings_dict, server, schedulers, caplog, queue_cls
):
    settings = {
        **settings_dict,
        "SCHEDULER_QUEUE_CLASS": queue_cls,
        "SCHEDULER_PERSIST": True,
    }
    first = schedulers(settings)
    urls = ["http://example.com/poison", *(f"http://example.com/{n}" for n in range(4))]
    for url in urls:
        first.enqueue_request(Request(url, priority=3))
    assert first.send_enqueued()
    assert first.next_request().url == urls[0]  # leases all five, then dies with the poison
    for _ in range(2):  # two more workers take it (alone now), and die with it
        assert expire_leases(server) == 1
        worker = schedulers(settings)  # opening recovers the dead worker's leases
        assert worker.next_request().url == urls[0]
        assert leased_entries(server) == 1  # the others were not leased with it
    assert expire_leases(server) == 1
    with caplog.at_level(logging.ERROR, logger="scrapy_redis.scheduler"):
        last = schedulers(settings)
    assert "Moved 1 requests to demo:requests:dead" in caplog.text
    assert "SCHEDULER_MAX_DELIVERIES" in caplog.text
    assert last.stats.get_value("scheduler/leases/dead_lettered") == 1
    # The requests leased with the poison the first time are neither lost nor blamed:
    # suspects now, each worker works on one at a time.
    assert last.next_request().url == urls[1]
    assert last.next_request() is None  # while it works on that one
    assert [schedulers(settings).next_request().url for _ in range(3)] == urls[2:]
    assert dead_letters(server, "demo:requests")[0].request_dict()["url"] == urls[0]

    [letter] = dead_letters(server, "demo:requests")
    assert letter.request_dict()["url"] == urls[0]
    assert letter.priority == (3 if queue_cls.endswith("PriorityQueue") else None)
    assert requeue_dead_letters(server, "demo:requests") == 1
    assert dead_letters(server, "demo:requests") == []
    again = schedulers(settings).next_request()
    assert (again.url, again.priority) == (urls[0], 3)


def test_max_deliveries_zero_never_gives_up(settings_dict, server, schedulers):
    settings = {
        **settings_dict,
        "SCHEDULER_MAX_DELIVERIES": 0,
        "SCHEDULER_PERSIST": True,
    }
    worker = schedulers(settings)
    worker.enqueue_request(Request("http://example.com/poison"))
    for _ in range(4):
        assert worker.next_request().url == "http://example.com/poison"
        assert expire_leases(server) == 1
        worker = schedulers(settings)
    assert dead_letters(server, "demo:requests") == []


@pytest.mark.e2e
def test_a_page_that_kills_every_worker_ends_in_the_dead_letters(server, redis_url, tmp_path):
    """Real workers, one after the other, each killed by the same page: the fourth one
    moves it to the dead letters and crawls the rest of the site."""
    import subprocess
    import sys
    from pathlib import Path

    from test_e2e import DemoSite, expected_pages, parse_stats

    spider_file = Path(__file__).parent / "spiders" / "poison_spider.py"
    command = [sys.executable, "-m", "scrapy", "runspider", str(spider_file)]
    command += ["-s", f"REDIS_URL={redis_url}", "-s", "LOG_LEVEL=INFO"]
    with DemoSite(pages=60) as site:
        server.lpush("poison:start_urls", site.url)
        logs, codes = [], []
        for n in range(4):
            logs.append(tmp_path / f"worker-{n}.log")
            with logs[-1].open("wb") as log:
                run = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=120)
            codes.append(run.returncode)
            time.sleep(1.4)  # the dead worker's lease expires (SCHEDULER_WORKER_TIMEOUT = 1)
        hits = site.snapshot()
    last = logs[-1].read_text()
    assert codes == [3, 3, 3, 0], last[-3000:]
    assert "Moved 1 requests to poison:requests:dead" in last
    assert parse_stats(last)["scheduler/leases/dead_lettered"] == 1
    assert hits["/p/7.html"] == 3  # three deliveries, then never again
    [letter] = dead_letters(server, "poison:requests")
    assert letter.request_dict()["url"] == site.url.rstrip("/") + "/p/7.html"
    items = {json.loads(raw)["url"] for raw in server.lrange("poison:items", 0, -1)}
    base = site.url.rstrip("/")
    assert items == {base + path for path in expected_pages(60) - {"/p/7.html"}}


def test_a_typo_in_redis_cls_or_the_items_serializer_names_the_setting(settings_dict, server):
    from scrapy_redis.connection import get_redis_from_settings
    from scrapy_redis.pipelines import RedisPipeline

    crawler = get_crawler(
        DemoSpider, {**settings_dict, "REDIS_PARAMS": {"redis_cls": "redis.Rediss"}}
    )
    with pytest.raises(ConfigurationError, match=r'REDIS_PARAMS\["redis_cls"\] = .redis.Rediss.'):
        get_redis_from_settings(crawler.settings)
    crawler = get_crawler(DemoSpider, {**settings_dict, "REDIS_ITEMS_SERIALIZER": "json.dump_s"})
    with pytest.raises(
        ConfigurationError, match=re.escape("REDIS_ITEMS_SERIALIZER = 'json.dump_s'")
    ):
        RedisPipeline.from_crawler(crawler)


def test_the_heartbeat_keeps_what_the_worker_prefetched(settings_dict, server, schedulers):
    clock = Clock()
    scheduler = schedulers(
        {**settings_dict, "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueue"}, reactor=clock
    )
    urls = [f"http://example.com/{n}" for n in range(5)]
    for url in urls:
        scheduler.enqueue_request(Request(url))
    assert scheduler.send_enqueued()
    assert scheduler.next_request().url == urls[0]  # the others are prefetched
    clock.advance(scheduler.worker_timeout / 3)  # the heartbeat
    assert [scheduler.next_request().url for _ in range(4)] == urls[1:]


def test_a_worker_holding_a_suspect_takes_the_requests_behind_the_others(
    settings_dict, server, schedulers
):
    settings = {
        **settings_dict,
        "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueue",
        "SCHEDULER_PREFETCH": 1,
        "SCHEDULER_ENQUEUE_DELAY": 0,
    }
    dead = schedulers(settings)
    for n in range(3):
        dead.enqueue_request(Request(f"http://example.com/{n}"))
    for _ in range(3):
        assert dead.next_request() is not None  # then it dies holding all three
    assert expire_leases(server) == 3
    worker = schedulers(settings)  # recovers them: suspects, at the head of the queue
    worker.enqueue_request(Request("http://example.com/new"))
    assert worker.next_request().url == "http://example.com/0"  # its one suspect
    assert worker.next_request().url == "http://example.com/new"  # not stuck behind 1, 2
    assert worker.next_request() is None  # 1 and 2 wait for a worker without a suspect
    assert [schedulers(settings).next_request().url for _ in range(2)] == [
        "http://example.com/1",
        "http://example.com/2",
    ]
