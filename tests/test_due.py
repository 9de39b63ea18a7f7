"""Requests due later (issue 27.2): ``meta["due_in"]`` and ``fetch_later()``; they wait in
Redis, leased by no one, and join the queue in their priority when due by the server's
clock; a crawl with one due soon is not idle."""

from __future__ import annotations

import time

import msgpack
import pytest
from scrapy import Request

from helpers import record_dropped
from scrapy_redis.scheduling.due import META_KEY, POLL, fetch_later
from scrapy_redis.spiders import RedisSpider
from scrapy_redis.store.scripts import script

DUE = "demo:requests:due"


def _server_ms(server) -> int:
    seconds, micros = server.time()
    return seconds * 1000 + micros // 1000


def _next_when_due(scheduler, timeout: float = 30.0) -> Request:
    deadline = time.monotonic() + timeout
    while (request := scheduler.next_request()) is None:
        assert time.monotonic() < deadline, "never due"
        time.sleep(0.02)
    return request


@pytest.mark.parametrize("queue", ["PriorityQueue", "FifoQueue", "LifoQueue"])
def test_a_request_waits_until_due_then_joins_its_priority(
    settings_dict, server, schedulers, queue
):
    scheduler = schedulers(
        {**settings_dict, "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue}"}
    )
    scheduled = _server_ms(server)
    later = Request("http://example.com/later", priority=5, meta={META_KEY: 1.5})
    assert scheduler.enqueue_request(later) is True
    scheduler.enqueue_request(Request("http://example.com/now"))
    scheduler.send_enqueued()
    assert scheduler.next_request().url == "http://example.com/now"
    assert scheduler.next_request() is None
    [(member, due)] = server.zrange(DUE, 0, -1, withscores=True)
    assert scheduled + 1500 <= due <= _server_ms(server) + 1500
    priority, _, _ = msgpack.unpackb(member, raw=True)
    assert priority == 5
    request = _next_when_due(scheduler)
    fetched = _server_ms(server)
    assert request.url == "http://example.com/later" and request.priority == 5
    assert fetched >= scheduled + 1500  # by the server's clock
    assert fetched <= due + (POLL + 3) * 1000  # within a poll (and a busy machine's slack)
    assert not server.exists(DUE)


def test_due_later_survives_the_worker_that_scheduled_it(settings_dict, server, schedulers):
    first, second = schedulers(settings_dict), schedulers(settings_dict)
    first.enqueue_request(Request("http://example.com/x", meta={META_KEY: 1}))
    first.stop_timers()  # the worker is gone: nothing of it runs any more
    assert server.zcard(DUE) == 1
    assert not server.exists("demo:requests:leases")  # leased by no one
    assert _next_when_due(second).url == "http://example.com/x"


def test_each_due_request_is_moved_once(settings_dict, server, schedulers):
    first, second = schedulers(settings_dict), schedulers(settings_dict)
    for n in range(20):
        first.enqueue_request(Request(f"http://example.com/{n}", meta={META_KEY: 0}))
    due_first, due_second = first._parts.buffer.due, second._parts.buffer.due
    assert due_first.promote(now=True) + due_second.promote(now=True) == 20
    urls = [r.url for r in iter(second.next_request, None)]
    assert sorted(urls) == sorted(f"http://example.com/{n}" for n in range(20))


def test_a_known_request_due_later_is_a_duplicate_unless_dont_filter(
    settings_dict, server, schedulers
):
    scheduler = schedulers({**settings_dict, "SCHEDULER_ENQUEUE_DELAY": 0})
    record_dropped(scheduler)
    assert scheduler.enqueue_request(Request("http://example.com/a")) is True
    assert scheduler.enqueue_request(Request("http://example.com/a", meta={META_KEY: 5})) is False
    again = fetch_later(Request("http://example.com/a"), 5)
    assert again.dont_filter and again.meta[META_KEY] == 5.0
    assert scheduler.enqueue_request(again) is True
    assert server.zcard(DUE) == 1


def test_the_crawl_is_not_idle_while_a_request_is_due_soon(settings_dict, server, schedulers):
    settings = {**settings_dict, "MAX_IDLE_TIME_BEFORE_CLOSE": 5}
    scheduler = schedulers(settings)
    assert scheduler.shared_work_pending() is False
    scheduler.enqueue_request(Request("http://example.com/far", meta={META_KEY: 60}))
    scheduler.send_enqueued()
    assert scheduler.shared_work_pending() is False  # due after the idle time: may close
    scheduler.enqueue_request(Request("http://example.com/soon", meta={META_KEY: 3}))
    scheduler.send_enqueued()
    assert scheduler.shared_work_pending() is True


def test_the_spider_helper(settings_dict):
    request = RedisSpider(name="s").fetch_later(Request("http://example.com"), 600)
    assert request.meta[META_KEY] == 600.0 and request.dont_filter


def test_purge_queue_deletes_the_requests_due_later(server, redis_url):
    from helpers import scrapy_redis

    server.zadd("myspider_redis:requests:due", {b"x": 1})
    result = scrapy_redis(redis_url, "purge", "myspider_redis", "--queue", "--yes")
    assert result.returncode == 0, result.stderr
    assert not server.exists("myspider_redis:requests:due")


@pytest.mark.parametrize("fleet", [False, True], ids=["PriorityQueue", "per slot"])
def test_an_entry_that_is_no_request_due_later_is_set_aside_not_a_crash(
    settings_dict, server, schedulers, fleet
):
    settings = {**settings_dict, "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.PriorityQueue"}
    settings["SCHEDULER_FLEET_LIMITS"] = fleet
    scheduler = schedulers(settings)
    scheduler.stop_timers()
    junk = [b"\xc1not msgpack", msgpack.packb({"a": 1}), msgpack.packb([2**60, 1, b"x"])]
    server.zadd(DUE, {member: 0 for member in junk})  # anyone may write to Redis
    scheduler.enqueue_request(Request("http://example.com/due", meta={META_KEY: 0}))
    assert scheduler.send_enqueued()
    assert _next_when_due(scheduler).url == "http://example.com/due"
    assert sorted(server.lrange("demo:requests:invalid", 0, -1)) == sorted(junk)
    assert not server.exists(DUE)


#: The queues keeping requests due later: the list and priority queues, and per slot.
EVERY_QUEUE = pytest.mark.parametrize(
    "queue, fleet",
    [("FifoQueue", False), ("PriorityQueue", False), ("PriorityQueue", True)],
    ids=["FifoQueue", "PriorityQueue", "per slot"],
)


def _five_due_now(schedulers, settings_dict: dict, queue: str, fleet: bool):
    """A scheduler (its timers stopped: nothing moves on its own) of ``queue`` (with
    fleet-wide limits: ``fleet``) that scheduled 5 requests due now, example.com/0 to /4."""
    settings = {**settings_dict, "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue}"}
    scheduler = schedulers({**settings, "SCHEDULER_FLEET_LIMITS": fleet})
    scheduler.stop_timers()
    for n in range(5):
        scheduler.enqueue_request(Request(f"http://example.com/{n}", meta={META_KEY: 0}))
    assert scheduler.send_enqueued()
    return scheduler


@EVERY_QUEUE
def test_a_member_redis_cannot_read_loses_no_request_due(
    settings_dict, server, schedulers, queue, fleet
):
    scheduler = _five_due_now(schedulers, settings_dict, queue, fleet)
    # msgpack Python reads but Redis' cmsgpack does not (an ExtType), due after the five
    bad = msgpack.packb([0, msgpack.ExtType(1, b"x"), b"request"])
    server.zadd(DUE, {bad: max(score for _, score in server.zrange(DUE, 0, -1, withscores=True))})
    due = scheduler._parts.buffer.due
    assert due.promote(now=True) == 5
    assert server.lrange("demo:requests:invalid", 0, -1) == [bad]
    assert not server.exists(DUE)
    urls = [r.url for r in iter(scheduler.next_request, None)]
    assert sorted(urls) == [f"http://example.com/{n}" for n in range(5)]
    scheduler.enqueue_request(Request("http://example.com/again", meta={META_KEY: 0}))
    assert scheduler.send_enqueued()
    assert due.promote(now=True) == 1  # the next promote works too
    assert _next_when_due(scheduler).url == "http://example.com/again"


@EVERY_QUEUE
def test_the_promote_scripts_set_aside_what_cmsgpack_cannot_read(
    settings_dict, server, schedulers, queue, fleet
):
    # as a worker that does not check the members first (an older version) would call them
    scheduler = _five_due_now(schedulers, settings_dict, queue, fleet)
    bad = [msgpack.packb([0, msgpack.ExtType(1, b"x"), b"request"]), msgpack.packb([0, 1, 2])]
    server.zadd(DUE, {member: 0 for member in bad})
    members = server.zrange(DUE, 0, -1)
    assert scheduler._parts.buffer.due._move(0, members) == 5
    assert sorted(server.lrange("demo:requests:invalid", 0, -1)) == sorted(bad)
    assert not server.exists(DUE)
    urls = [r.url for r in iter(scheduler.next_request, None)]
    assert sorted(urls) == [f"http://example.com/{n}" for n in range(5)]


def _load_scripts(client, *names: str) -> None:
    """Load the scripts ``names`` (on every master of a cluster)."""
    for name in names:
        client.script_load(script(name).source)


def _laned_per_slot(settings_dict: dict) -> dict:
    return {
        **settings_dict,
        "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.PriorityQueue",
        "SCHEDULER_FLEET_LIMITS": True,
        "SCHEDULER_SHARDS": 4,
    }


def test_a_poll_of_every_lane_is_one_round_trip_and_a_move_one_more(
    settings_dict, server, schedulers
):
    """The requests due later of a crawl split into lanes: a poll looks at every lane in
    one round trip (not one a lane, on the reactor thread), and moves what is due in every
    lane in one more."""
    from helpers import round_trips

    scheduler = schedulers(_laned_per_slot(settings_dict))
    scheduler.stop_timers()
    due = scheduler._parts.buffer.due
    assert len(due.keys) == 4
    _load_scripts(server, "due_ready", "due_promote_slots")  # (a first call sends them)
    with round_trips() as sent:
        assert due.promote(now=True) == 0
        assert due.pending_within(0) is False
    assert len(sent) == 2  # one a call, whatever the lanes
    urls = [f"http://h{n}.test/" for n in range(12)]
    for url in urls:
        scheduler.enqueue_request(Request(url, meta={META_KEY: 0}))
    assert scheduler.send_enqueued()
    assert sum(1 for key in due.keys if server.zcard(key)) > 1  # in several lanes
    with round_trips() as sent:
        assert due.promote(now=True) == len(urls)
    assert len(sent) == 2  # look, then move
    assert sum(server.zcard(key) for key in due.keys) == 0
    assert sorted(r.url for r in iter(scheduler.next_request, None)) == sorted(urls)


def test_a_poll_after_a_redis_restart_loads_its_scripts_again(settings_dict, server, schedulers):
    """A pipelined poll whose scripts the server does not know (a restart emptied its
    script cache) sends them in full: nothing lost."""
    scheduler = schedulers(_laned_per_slot(settings_dict))
    scheduler.stop_timers()
    scheduler.enqueue_request(Request("http://h.test/", meta={META_KEY: 0}))
    assert scheduler.send_enqueued()
    server.script_flush()
    assert scheduler._parts.buffer.due.promote(now=True) == 1
    assert scheduler.next_request().url == "http://h.test/"
