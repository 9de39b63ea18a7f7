"""Where two features built apart meet: requests due later and the fleet-wide limits,
the tools that delete or move a crawl, the pipeline's batches. Each test failed on the
merged code before its fix (found by reviewing the merge)."""

from __future__ import annotations

import json
import time

import msgpack
import pytest
import redis
from scrapy import Request

from helpers import open_scheduler, until_stored
from redis_server import RedisServer
from scrapy_redis.fleet.move_crawl import main as move_main
from scrapy_redis.fleet.move_crawl import move_due, push_once
from scrapy_redis.fleet.operations import purge_queue
from scrapy_redis.politeness.queue import member_slot, queued_members
from scrapy_redis.queues.base import Candidate, Entry
from scrapy_redis.scheduling.due import META_KEY
from scrapy_redis.scheduling.lanes import lane_of
from test_commands import leave, schedule, write_project
from test_stats_pipeline import batching_pipeline


@pytest.fixture
def project(tmp_path, redis_url, server):
    return write_project(tmp_path, redis_url)


DUE = "demo:requests:due"

FLEET = {
    "SCHEDULER_FLEET_LIMITS": True,
    "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.PriorityQueue",
}


def _server_ms(server) -> int:
    seconds, micros = server.time()
    return seconds * 1000 + micros // 1000


def _when_due(scheduler, timeout: float = 30.0) -> Request:
    deadline = time.monotonic() + timeout
    while (request := scheduler.next_request()) is None:
        assert time.monotonic() < deadline, "never due"
        time.sleep(0.02)
    return request


def test_a_request_due_later_waits_then_joins_its_slot_under_the_fleet_limits(
    settings_dict, server, schedulers
):
    settings = {**settings_dict, **FLEET, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}
    scheduler = schedulers(settings)
    scheduled = _server_ms(server)
    for n in range(2):
        scheduler.enqueue_request(Request(f"http://later.test/{n}", meta={META_KEY: 1.5}))
    scheduler.enqueue_request(Request("http://now.test/"))
    assert scheduler.send_enqueued()
    assert scheduler.next_request().url == "http://now.test/"
    assert scheduler.next_request() is None
    members = server.zrange("demo:requests:due", 0, -1)
    assert [msgpack.unpackb(m, raw=True)[3] for m in members] == [b"later.test"] * 2
    first = _when_due(scheduler)
    assert _server_ms(server) >= scheduled + 1500  # no sooner than due, by the server's clock
    assert first.url.startswith("http://later.test/")
    assert scheduler.next_request() is None  # its slot's concurrency (1) still holds
    assert not server.exists("demo:requests:due")
    assert scheduler.stats.get_value("scheduler/due/unsupported") is None


def test_requests_due_later_of_a_split_crawl_join_their_slots_lane(
    settings_dict, server, schedulers
):
    settings = {**settings_dict, **FLEET, "SCHEDULER_SHARDS": 4}
    scheduler = schedulers(settings)
    hosts = [f"http://h{n}.test/" for n in range(8)]
    for url in hosts:
        scheduler.enqueue_request(Request(url, meta={META_KEY: 0}))
    assert scheduler.send_enqueued()
    due = scheduler._parts.buffer.due
    assert len(due.keys) == 4 and sum(server.zcard(key) for key in due.keys) == 8
    assert due.promote(now=True) == 8
    for number, lane in enumerate(scheduler.queue.lanes):
        for member in queued_members(server, lane.key, lane.on_cluster):
            slot = member_slot(member)
            assert lane_of(Candidate(None, Entry(b"", slot=slot)), 4) == number
    assert sorted(r.url for r in iter(scheduler.next_request, None)) == sorted(hosts)


def test_purging_a_queue_deletes_its_requests_due_later_and_a_moves_marks(
    settings_dict, server, schedulers
):
    scheduler = schedulers(settings_dict)
    scheduler.stop_timers()
    scheduler.enqueue_request(Request("http://x.test/", meta={META_KEY: 3600}))
    scheduler.enqueue_request(Request("http://y.test/"))
    assert scheduler.send_enqueued()
    entry = scheduler.queue.encode(Request("http://m.test/1"))
    assert push_once(scheduler.queue, [entry]) == 1  # a move stopped before its release
    assert server.exists("demo:requests:due", "demo:requests:moving") == 2
    purge_queue(server, "demo:requests")  # what the dashboard's purge runs per lane
    assert not server.exists("demo:requests:due", "demo:requests:moving")
    assert scheduler.next_request() is None


def test_a_crawl_flushed_loses_its_requests_due_later_too(settings_dict, server, schedulers):
    scheduler = schedulers(settings_dict)
    scheduler.stop_timers()
    scheduler.enqueue_request(Request("http://x.test/", meta={META_KEY: 3600}))
    assert scheduler.send_enqueued()
    assert server.exists("demo:requests:due")
    scheduler.flush()
    assert not server.exists("demo:requests:due")


def _kept_crawl_with_due(redis_url: str) -> None:
    settings = {
        "REDIS_URL": redis_url,
        "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.PriorityQueue",
        "SCHEDULER_PERSIST": True,
    }
    scheduler = open_scheduler(settings)
    scheduler.enqueue_request(Request("http://a.test/now"))
    scheduler.enqueue_request(Request("http://a.test/hour", meta={META_KEY: 3600}))
    scheduler.enqueue_request(Request("http://a.test/soon", priority=3, meta={META_KEY: 2}))
    assert scheduler.send_enqueued()
    scheduler.close("shutdown")
    scheduler.stop_timers()


def test_a_crawl_with_requests_due_later_moves_them_kept_due(redis_url, server, schedulers):
    _kept_crawl_with_due(redis_url)
    due_at = dict(server.zrange(DUE, 0, -1, withscores=True))
    target = RedisServer().start()
    try:
        moved = move_main(["demo", "--from", redis_url, "--to", target.url, "--delete-source"])
        assert moved == 0
        assert not server.exists(DUE)  # deleted once moved
        client = redis.Redis.from_url(target.url)
        scores = dict(client.zrange(DUE, 0, -1, withscores=True))
        assert scores.keys() == due_at.keys()  # the same members: priority, request
        for member, score in scores.items():  # the same time (one machine: one clock)
            assert 0 <= score - due_at[member] <= 2000  # (the time it had left, from the move)
        assert not client.exists("demo:requests:moving")
        settings = {"REDIS_URL": target.url, "SCHEDULER_PERSIST": True,
                    "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.PriorityQueue"}  # fmt: skip
        worker = schedulers(settings)
        assert worker.next_request().url == "http://a.test/now"
        soon = _when_due(worker)
        assert soon.url == "http://a.test/soon" and soon.priority == 3
        assert _server_ms(client) >= scores[min(scores, key=scores.get)]  # not sooner
        assert client.zcard(DUE) == 1  # the one due in an hour waits
        worker.stop_timers()
    finally:
        target.stop()


def test_a_member_of_the_due_set_that_is_no_request_moves_as_it_is(redis_url, server):
    _kept_crawl_with_due(redis_url)
    server.zadd(DUE, {b"\xc1junk": 1})
    target = RedisServer().start()
    try:
        fleet = ["-s", "SCHEDULER_FLEET_LIMITS=True", "-s", "SCHEDULER_SHARDS=3"]
        assert move_main(["demo", "--from", redis_url, "--to", target.url, *fleet]) == 0
        client = redis.Redis.from_url(target.url)
        due_keys = client.keys("*:due")
        assert len(due_keys) > 1  # the lanes'
        assert sum(client.zscore(key, b"\xc1junk") is not None for key in due_keys) == 1
        assert not server.exists(DUE)
    finally:
        target.stop()


def test_a_move_stopped_after_pushing_due_requests_pushes_none_twice(
    redis_url, server, schedulers, monkeypatch
):
    _kept_crawl_with_due(redis_url)
    server.zadd(DUE, {m: 0 for m in server.zrange(DUE, 0, -1)})  # all due now
    target = RedisServer().start()
    try:
        source = open_scheduler(
            {
                "REDIS_URL": redis_url,
                "SCHEDULER_PERSIST": True,
                "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.PriorityQueue",
            }
        )
        settings = {"REDIS_URL": target.url, "SCHEDULER_PERSIST": True,
                    "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.PriorityQueue"}  # fmt: skip
        worker = schedulers(settings)
        worker.stop_timers()

        def dies(*args):
            raise redis.ConnectionError("the move dies here")

        monkeypatch.setattr(source.server, "zrem", dies)
        with pytest.raises(redis.ConnectionError):
            move_due(source, worker)
        monkeypatch.undo()
        assert server.zcard(DUE) == 2  # still on the source
        assert worker._parts.buffer.due.promote(now=True) == 2  # fetched on the target
        assert move_due(source, worker) == 0  # run again: none pushed twice
        assert not server.exists(DUE) and worker.server.zcard(DUE) == 0
        assert not worker.server.exists("demo:requests:moving")
        urls = sorted(r.url for r in iter(worker.next_request, None))
        assert urls == ["http://a.test/hour", "http://a.test/soon"]
        source.close("finished")
        source.stop_timers()
    finally:
        target.stop()


def test_export_lists_the_requests_queued_per_download_slot(
    project, schedulers, settings_dict, server
):
    requests = [Request(f"http://a{n}.test/p") for n in range(5)]
    big = [Request(f"http://big.test/{n}") for n in range(9)]  # a list (lua/_slot_store.lua)
    leave(schedule(schedulers, {**settings_dict, **FLEET}, [*requests, *big]))
    exported = project.run("export", "demo", "queue")
    assert exported.returncode == 0, exported.stderr
    urls = [json.loads(line)["url"] for line in exported.stdout.splitlines()]
    assert sorted(urls) == sorted(request.url for request in [*requests, *big])
    assert [url for url in urls if "big" in url] == [request.url for request in big]


def test_requests_due_later_keep_a_spider_open_for_its_own_max_idle_time_only(
    settings_dict, server, schedulers
):
    scheduler = schedulers(settings_dict)  # MAX_IDLE_TIME_BEFORE_CLOSE unset: 0
    scheduler.stop_timers()
    scheduler.spider.max_idle_time = 5  # a RedisSpider's attribute, as it resolved it
    scheduler.enqueue_request(Request("http://x.test/", meta={META_KEY: 3600}))
    assert scheduler.send_enqueued()
    assert not scheduler.has_pending_requests()  # due in an hour: not within 5 s
    scheduler.spider.max_idle_time = 7200
    assert scheduler.has_pending_requests()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_batch_with_a_list_of_another_type_writes_nothing(settings_dict, server):
    pipe = batching_pipeline(settings_dict, REDIS_ITEMS_BATCH_SIZE=100, REDIS_ITEMS_DELAY=0.5)
    pipe.item_key = lambda item, spider: "good" if item["n"] % 2 == 0 else "bad"
    server.set("bad", "x")
    answers = [until_stored(pipe.process_item({"n": n})) for n in range(6)]
    pipe.clock.advance(0.5)
    failed: list[str] = []
    for answer in answers:
        answer.addErrback(lambda failure: failed.append(failure.getErrorMessage()))
    assert len(failed) == 6 and all("WRONGTYPE" in message for message in failed)
    assert server.llen("good") == 0  # reported failed: not stored either
