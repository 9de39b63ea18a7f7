"""Crawls that keep going (issue 27) on the real 6-node Redis Cluster: requests due later
(with and without fleet-wide limits), fingerprints that expire and ``scrapy redis forget``
(run as a user runs it, from a project directory), and ``status`` of them."""

from __future__ import annotations

import time

import pytest
from scrapy import Request
from scrapy.settings import Settings

from helpers import DemoSpider
from scrapy_redis.fleet.status import crawl_status
from scrapy_redis.scheduling.due import META_KEY
from scrapy_redis.store.keys import bloom_generation_key
from test_cluster import scheduler_settings
from test_commands import write_project

FLEET = {"SCHEDULER_FLEET_LIMITS": True, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}


def _server_ms(cluster, key: str) -> int:
    """The clock of the master holding ``key``."""
    seconds, micros = cluster.time(target_nodes=cluster.get_node_from_key(key))
    return seconds * 1000 + micros // 1000


def _fetched(scheduler, count: int, timeout: float = 30.0) -> list[Request]:
    deadline = time.monotonic() + timeout
    found: list[Request] = []
    while len(found) < count:
        assert time.monotonic() < deadline, [r.url for r in found]
        found += list(iter(scheduler.next_request, None))
        time.sleep(0.02)
    return found


@pytest.mark.parametrize("fleet", [False, True], ids=["queue", "per slot"])
def test_requests_due_later_come_no_sooner_than_due_by_the_servers_clock(
    redis_cluster, cluster, schedulers, fleet
):
    settings = {**scheduler_settings(redis_cluster.url, "PriorityQueue"), "SCHEDULER_PERSIST": True}
    settings.update(FLEET if fleet else {})
    first, second = schedulers(settings), schedulers(settings)
    due = first._parts.buffer.due
    scheduled = min(_server_ms(cluster, key) for key in due.keys)
    urls = [f"http://h{n}.test/later" for n in range(6)]
    for url in urls:
        first.enqueue_request(Request(url, meta={META_KEY: 1.5}))
    first.enqueue_request(Request("http://now.test/"))
    assert first.send_enqueued()
    first.stop_timers()  # it is gone: the other moves them when due
    assert [r.url for r in _fetched(second, 1)] == ["http://now.test/"]
    fetched = _fetched(second, len(urls))
    assert min(_server_ms(cluster, key) for key in due.keys) >= scheduled + 1500
    assert sorted(r.url for r in fetched) == sorted(urls)
    assert sum(cluster.zcard(key) for key in due.keys) == 0
    second.flush()


@pytest.mark.parametrize(
    "dupefilter, extra",
    [
        ("RFPDupeFilter", {}),
        ("RFPDupeFilter", {"DUPEFILTER_LIFETIME": 3600}),
        ("LeanDupeFilter", {}),
        ("LeanDupeFilter", {"DUPEFILTER_LIFETIME": 3600}),
        ("RFPDupeFilter", {"SCHEDULER_FLEET_LIMITS": True}),
    ],
    ids=["set", "sorted set", "lean", "lean generations", "set per slot"],
)
def test_forget_on_the_cluster(tmp_path, redis_cluster, cluster, schedulers, dupefilter, extra):
    settings = {
        **scheduler_settings(redis_cluster.url, "PriorityQueue", dupefilter),
        "SCHEDULER_PERSIST": True,
        **extra,
    }
    urls = [f"http://h{n % 5}.test/{n}" for n in range(20)]
    worker = schedulers(settings)
    for url in urls:
        worker.enqueue_request(Request(url))
    assert worker.send_enqueued()
    assert len(_fetched(worker, len(urls))) == len(urls)
    project = write_project(tmp_path, redis_cluster.url)
    path = project.path / "proj" / "settings.py"
    chosen = {**extra, "DUPEFILTER_CLASS": f"scrapy_redis.dupefilter.{dupefilter}"}
    chosen["DUPEFILTER_LEAN_CAPACITY"] = 10_000
    path.write_text(path.read_text() + "".join(f"{k} = {v!r}\n" for k, v in chosen.items()))
    result = project.run("forget", "demo", urls[3], urls[7], "http://h9.test/never")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Forgot 2 of 3 URLs of demo.\n"
    later = schedulers(settings)  # (a running worker drops what it remembers within 1 s)
    for url in urls:
        later.enqueue_request(Request(url))
    assert later.send_enqueued()
    again = sorted(r.url for r in _fetched(later, 2))
    assert again == sorted([urls[3], urls[7]])  # the forgotten ones, not the others
    assert later.next_request() is None
    later.flush()


def test_status_counts_due_and_expiring_across_the_lanes(redis_cluster, cluster, schedulers):
    settings = {
        **scheduler_settings(redis_cluster.url, "PriorityQueue"),
        "SCHEDULER_PERSIST": True,
        "DUPEFILTER_LIFETIME": 1800,
        **FLEET,
    }
    worker = schedulers(settings)
    for n in range(9):
        worker.enqueue_request(Request(f"http://h{n}.test/", meta={META_KEY: 600}))
        worker.enqueue_request(Request(f"http://h{n}.test/now"))
    assert worker.send_enqueued()
    due = worker._parts.buffer.due
    assert sum(1 for key in due.keys if cluster.zcard(key)) > 1  # spread over the lanes
    status = crawl_status(worker.server, Settings(settings), DemoSpider)
    assert status.due_later["count"] == 9 and 500 < status.due_later["next_due_in"] <= 600
    assert status.expiring["alive"] == 18 and status.expiring["expiring_soon"] == 18
    worker.flush()


def test_a_poll_of_the_lanes_is_one_round_trip_per_master(redis_cluster, cluster, schedulers):
    """On the cluster the lanes' due keys sit on several masters: a poll looks at every
    lane with one pipeline (redis-py sends each master its part before reading any
    reply), and moves what is due with one more, each lane's move one script call."""
    from helpers import round_trips
    from test_due import _load_scripts

    settings = {**scheduler_settings(redis_cluster.url, "PriorityQueue"), **FLEET}
    scheduler = schedulers({**settings, "SCHEDULER_SHARDS": 6})
    scheduler.stop_timers()
    due = scheduler._parts.buffer.due
    masters = len(cluster.get_primaries())
    assert len(due.keys) > masters
    _load_scripts(cluster, "due_ready", "due_promote_slots")  # (a first call sends them)
    with round_trips() as sent:
        assert due.promote(now=True) == 0
    assert len(sent) <= masters  # before: one a lane
    urls = [f"http://h{n}.test/" for n in range(12)]
    for url in urls:
        scheduler.enqueue_request(Request(url, meta={META_KEY: 0}))
    assert scheduler.send_enqueued()
    with round_trips() as sent:
        assert due.promote(now=True) == len(urls)
    assert len(sent) <= 2 * masters
    assert sorted(r.url for r in _fetched(scheduler, len(urls))) == sorted(urls)
    scheduler.flush()


def test_the_redisbloom_fill_check_asks_the_filters_master_once(cluster):
    """The generations' counts (a RedisBloom filter's fill check): one round trip to the
    master of the filter's hash slot, whatever the generations (none here: the cluster
    has no RedisBloom, and a generation that does not exist is no error)."""
    from helpers import round_trips
    from scrapy_redis.dupefilters.redisbloom import module_counts

    keys = [bloom_generation_key("demo:dupefilter", k, True) for k in range(5)]
    assert module_counts(cluster, keys) == [None] * 5  # (a first call connects)
    with round_trips() as sent:
        assert module_counts(cluster, keys) == [None] * 5
    assert len(sent) == 1
