"""scrapy_redis.fleet.status: what a crawl holds in a real redis-server, read from outside
(by ``scrapy redis status``, ``watch`` and the dashboard), with the workers' own
schedulers writing it."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest
from scrapy import Request
from scrapy.settings import Settings
from twisted.internet.task import Clock

from helpers import DemoSpider, expire_leases, expire_workers
from scrapy_redis.fleet.status import crawl_status, project_spiders
from scrapy_redis.metrics.values import encode_value
from scrapy_redis.spiders import RedisSpider
from scrapy_redis.store.keys import worker_stats_key


class StartSpider(RedisSpider):
    name = "demo"
    redis_key = "demo:start_urls"


def status_of(server, settings_dict, spidercls=DemoSpider, **extra):
    return crawl_status(server, Settings({**settings_dict, **extra}), spidercls)


def enqueue(scheduler, urls_priorities):
    for url, priority in urls_priorities:
        scheduler.enqueue_request(Request(url, priority=priority))
    assert scheduler.send_enqueued()


def test_priority_queue_leases_and_workers(settings_dict, server, schedulers):
    settings = {**settings_dict, "SCHEDULER_PREFETCH": 2}
    worker = schedulers(settings)
    other = schedulers(settings)
    enqueue(worker, [(f"http://example.com/{n}", n % 3) for n in range(9)])
    worker.enqueue_request(Request("http://example.com/0"))  # a duplicate
    worker.send_enqueued()
    assert worker.next_request() is not None  # leases a batch of 2 (the highest priority)

    status = status_of(server, settings)

    assert status.queue_class == "PriorityQueue"
    assert status.queued + status.leased == 9
    assert status.leased == 2
    assert status.queued_by_priority == {2: 1, 1: 3, 0: 3}
    assert status.fingerprints == 9
    assert status.workers_alive == 2
    by_id = {w.id: w for w in status.workers}
    assert by_id[worker.worker_id].leased == 2
    assert by_id[other.worker_id].leased == 0
    assert all(0 <= w.heartbeat_age < 5 for w in status.workers)
    assert status.expired_leases == 0
    assert status.diagnosis is None  # work is being done, none waits unseen
    json.dumps(status.to_json())


def test_a_dead_workers_leases_and_the_diagnosis(settings_dict, server, schedulers):
    settings = {**settings_dict, "SCHEDULER_PREFETCH": 4}
    # Its heartbeat runs on a clock nobody advances: it dies holding its leases.
    dead = schedulers(settings, reactor=Clock())
    enqueue(dead, [(f"http://example.com/{n}", 0) for n in range(4)])
    assert dead.next_request() is not None

    alive_now = status_of(server, settings)
    assert alive_now.workers_alive == 1 and alive_now.leased == 4
    assert (expire_workers(server), expire_leases(server)) == (1, 1)  # no heartbeat for long
    status = status_of(server, settings)

    assert status.workers_alive == 0
    assert status.workers[0].id == dead.worker_id
    assert status.workers[0].heartbeat_age >= dead.worker_timeout
    assert status.leased == 4 and status.expired_leases == 4  # requests, as leased counts
    assert "stopped responding" in status.diagnosis
    assert "scrapy redis requeue demo" in status.diagnosis


def test_leased_elsewhere_is_the_diagnosis_of_an_idle_worker(settings_dict, server, schedulers):
    busy, idle = schedulers(settings_dict), schedulers(settings_dict)
    enqueue(busy, [("http://example.com/a", 0)])
    assert busy.next_request() is not None
    assert idle.next_request() is None

    status = status_of(server, settings_dict)

    assert status.queued == 0 and status.leased == 1
    assert f"leased by {busy.worker_id} (1)" in status.diagnosis
    assert "1 idle worker(s)" in status.diagnosis


def test_start_keys_items_and_stats(settings_dict, server):
    settings = {**settings_dict, "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueue"}
    server.rpush("demo:start_urls", "http://example.com/1", '{"url": "http://example.com/2"}')
    server.rpush("demo:items", "{}", "{}", "{}")
    server.hset("demo:stats", mapping={"response_received_count": 7, "item_scraped_count": 3})
    server.hset(
        worker_stats_key("demo:stats", "host:1:abc"),
        mapping={"worker/pages_per_second": encode_value(2.5), "response_received_count": 7},
    )
    server.hset("demo:requests:workers", "host:1:abc", int(time.time() * 1000) + 60_000)

    status = status_of(server, settings, StartSpider)

    assert status.queue_class == "FifoQueue" and status.queued_by_priority is None
    assert status.start_keys == ["demo:start_urls"] and status.start_pending == 2
    assert status.items == 3
    assert status.stats["response_received_count"] == 7
    (worker,) = status.workers
    assert worker.pages_per_second == 2.5 and worker.stats["response_received_count"] == 7
    assert "2 start messages wait in demo:start_urls but no worker reads them" in (status.diagnosis)


def test_nothing_alive_with_work_waiting(settings_dict, server):
    server.rpush("demo:start_urls", "http://example.com/1")
    status = status_of(server, settings_dict, StartSpider)
    # an empty crawl has 0 fingerprints and 0 items (not "unknown")
    assert status.workers == [] and status.fingerprints == 0 and status.items == 0
    assert status.diagnosis == (
        "0 requests and 1 start messages wait, but no worker is alive: start one with "
        "`scrapy crawl demo`"
    )


@pytest.mark.parametrize(
    ("setting", "key", "fill", "expected"),
    [
        ({}, "demo:requests", lambda s: s.rpush("demo:requests", "x"), "holds a list"),
        (
            {"REDIS_START_URLS_AS_SET": True},
            "demo:start_urls",
            lambda s: s.rpush("demo:start_urls", "http://example.com/"),
            "start key demo:start_urls holds a list, but the workers read a set",
        ),
    ],
)
def test_keys_of_the_wrong_type_are_named(settings_dict, server, setting, key, fill, expected):
    fill(server)
    status = status_of(server, settings_dict, StartSpider, **setting)
    assert expected in status.diagnosis


@pytest.mark.parametrize("dupefilter", ["LeanDupeFilter", "BloomDupeFilter"])
def test_lanes_and_the_lean_filters_are_counted(redis_url, server, schedulers, dupefilter):
    settings = {
        "REDIS_URL": redis_url,
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": f"scrapy_redis.dupefilter.{dupefilter}",
        "SCHEDULER_SHARDS": 3,
        "DUPEFILTER_LEAN_CAPACITY": 10_000,
        "BLOOMFILTER_CAPACITY": 10_000,
    }
    worker = schedulers(settings)
    enqueue(worker, [(f"http://example.com/{n}", n % 2) for n in range(30)])

    status = status_of(server, settings)

    assert status.lanes == 3
    assert status.queued == 30 and sum(status.queued_by_priority.values()) == 30
    assert status.fingerprints == 30


def test_on_a_cluster(redis_cluster, cluster, schedulers):
    settings = {
        "REDIS_URL": redis_cluster.url,
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    }
    worker = schedulers(settings)
    enqueue(worker, [(f"http://example.com/{n}", 0) for n in range(12)])
    assert worker.next_request() is not None

    status = status_of(worker.server, settings)

    assert status.lanes == 3  # a lane per master
    assert status.queued + status.leased == 12 and status.fingerprints == 12
    assert [w.id for w in status.workers] == [worker.worker_id]


def test_project_spiders(tmp_path, monkeypatch):
    package = tmp_path / "proj"
    (package / "spiders").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "spiders" / "__init__.py").write_text(
        "from scrapy_redis.spiders import RedisSpider\n"
        "class B(RedisSpider):\n    name = 'b'\n"
        "class A(RedisSpider):\n    name = 'a'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spiders = project_spiders(Settings({"SPIDER_MODULES": ["proj.spiders"]}))
    assert [cls.name for cls in spiders] == ["a", "b"]


def test_numbers_json_has_not_are_text(settings_dict, server, schedulers):
    """Stats hashes are written by anyone: a NaN or an infinity must not make the JSON
    of status (``--json``, the dashboard's /api/status) invalid."""
    worker = schedulers(settings_dict)
    own = worker_stats_key("demo:stats", worker.worker_id)
    server.hset(own, mapping={"worker/pages_per_second": "nan", "x": "inf"})
    server.hset("demo:stats", mapping={"y": "-inf", "z": "nan"})

    data = status_of(server, settings_dict).to_json()

    def refuse(constant):
        raise ValueError(constant)

    json.loads(json.dumps(data), parse_constant=refuse)  # strict JSON
    assert data["stats"]["y"] == "-inf" and data["stats"]["z"] == "nan"
    (shown,) = data["workers"]
    assert shown["pages_per_second"] is None and shown["stats"]["x"] == "inf"


def test_an_idle_worker_is_named_once_its_rate_covers_a_minute(settings_dict, server, schedulers):
    """A live worker holding no lease while requests wait, whose own stats say it fetched
    nothing: named once it has run for a whole rate window (a worker that just started
    has a rate of 0 too)."""
    worker = schedulers({**settings_dict, "SCHEDULER_PREFETCH": 1})
    enqueue(worker, [("http://example.com/a", 0)])
    now = crawl_status(server, Settings(settings_dict), DemoSpider).read_at
    own = worker_stats_key("demo:stats", worker.worker_id)
    started = datetime.fromtimestamp(now - 30, tz=timezone.utc)
    server.hset(own, mapping={"worker/pages_per_second": 0, "start_time": encode_value(started)})
    assert status_of(server, settings_dict).diagnosis is None  # 30 s: it may be starting
    started = datetime.fromtimestamp(now - 90, tz=timezone.utc)
    server.hset(own, "start_time", encode_value(started))
    assert status_of(server, settings_dict).diagnosis == (
        f"1 requests wait, but {worker.worker_id} fetched nothing for a minute and holds no "
        "lease: check its log (downloader delays, DOWNLOAD_SLOTS, an engine waiting on its "
        "start requests)"
    )
