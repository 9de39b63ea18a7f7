"""Moving a stopped crawl from one redis-server to a real Redis Cluster (into lanes), and
what the move refuses."""

from __future__ import annotations

import json
import time

import pytest
from scrapy import Request

from helpers import open_scheduler
from scrapy_redis.move_crawl import main
from scrapy_redis.scheduling.lanes import LanedQueue

URLS = [f"http://example.com/{n}" for n in range(300)]


def settings(url: str, **extra):
    return {
        "REDIS_URL": url,
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.PriorityQueue",
        "SCHEDULER_PERSIST": True,
        **extra,
    }


def a_kept_crawl(url: str, server) -> None:
    """A crawl of 'demo' stopped with SCHEDULER_PERSIST: 300 requests queued (3 priorities),
    100 crawled (fingerprints only), a start URL, items and stats."""
    scheduler = open_scheduler(settings(url))
    for n, page in enumerate(URLS):
        scheduler.enqueue_request(Request(page, priority=n % 3))
    for n in range(100):
        scheduler.enqueue_request(Request(f"http://example.com/done/{n}"))
    assert scheduler.send_enqueued()
    done = [scheduler.next_request() for _ in range(100)]  # the priority-2 ones first
    scheduler.close("shutdown")  # gives them back: crawled later, by the target's workers
    scheduler.stop_timers()
    assert len(done) == 100
    server.rpush("demo:start_urls", "http://example.com/start")
    server.rpush("demo:items", json.dumps({"url": "http://example.com/0"}))
    server.hset("demo:stats", "item_scraped_count", 1)


def args(source: str, target: str, *extra: str) -> list[str]:
    return ["demo", "--from", source, "--to", target, *extra,
            "-s", "SCHEDULER_QUEUE_CLASS=scrapy_redis.queue.PriorityQueue"]  # fmt: skip


def test_a_kept_crawl_moves_into_the_clusters_lanes(
    redis_url, server, redis_cluster, cluster, schedulers, capsys
):
    a_kept_crawl(redis_url, server)
    flushing = ["-s", "SCHEDULER_FLUSH_ON_START=True"]  # a project's: not when moving
    assert main([*args(redis_url, redis_cluster.url, "--delete-source"), *flushing]) == 0
    out = capsys.readouterr().out
    assert "Moved 400 requests and 400 fingerprints of demo" in out
    assert "demo:start_urls, demo:items, demo:stats" in out
    assert server.keys("*") == []  # --delete-source
    scheduler = schedulers(settings(redis_cluster.url))
    assert isinstance(scheduler.queue, LanedQueue) and len(scheduler.queue.lanes) == 3
    for page in URLS[:10]:  # their fingerprints moved too: duplicates
        scheduler.enqueue_request(Request(page))
    assert scheduler.send_enqueued()
    assert scheduler.stats.get_value("dupefilter/filtered") == 10
    popped = [r.url for r in iter(scheduler.next_request, None)]
    assert sorted(popped) == sorted([*URLS, *(f"http://example.com/done/{n}" for n in range(100))])
    assert cluster.lrange("demo:start_urls", 0, -1) == [b"http://example.com/start"]
    assert cluster.hget("demo:stats", "item_scraped_count") == b"1"
    assert cluster.llen("demo:items") == 1


def test_moving_while_a_worker_runs_is_refused(redis_url, server, redis_cluster, cluster):
    a_kept_crawl(redis_url, server)
    worker = open_scheduler(settings(redis_url))
    try:
        with pytest.raises(SystemExit, match=r"1 worker.*stop them first"):
            main(args(redis_url, redis_cluster.url))
    finally:
        worker.stop_timers()
    assert len(worker) == 400  # nothing moved


def test_a_target_with_data_is_refused_unless_forced(redis_url, server, redis_cluster, cluster):
    a_kept_crawl(redis_url, server)
    target = open_scheduler(settings(redis_cluster.url))
    target.enqueue_request(Request("http://example.com/elsewhere"))
    assert target.send_enqueued()
    target.close("finished")
    target.stop_timers()
    with pytest.raises(SystemExit, match="--force merges"):
        main(args(redis_url, redis_cluster.url))
    assert main(args(redis_url, redis_cluster.url, "--force")) == 0


def test_a_lean_filter_is_refused_unless_without_fingerprints(
    redis_url, server, redis_cluster, cluster, capsys
):
    lean = "DUPEFILTER_CLASS=scrapy_redis.dupefilter.LeanDupeFilter"
    scheduler = open_scheduler(
        settings(redis_url, DUPEFILTER_CLASS="scrapy_redis.dupefilter.LeanDupeFilter")
    )
    scheduler.enqueue_request(Request("http://example.com/a"))
    assert scheduler.send_enqueued()
    scheduler.close("finished")
    scheduler.stop_timers()
    with pytest.raises(SystemExit, match="cannot list its fingerprints"):
        main([*args(redis_url, redis_cluster.url), "-s", lean])
    assert main([*args(redis_url, redis_cluster.url, "--without-fingerprints"), "-s", lean]) == 0
    assert "Moved 1 requests and 0 fingerprints" in capsys.readouterr().out


def test_a_named_key_on_the_target_is_refused_before_anything_moves(
    redis_url, server, redis_cluster, cluster
):
    a_kept_crawl(redis_url, server)
    cluster.hset("demo:stats", "item_scraped_count", 5)  # the target's own stats
    with pytest.raises(SystemExit, match="demo:stats exists on the target: --force"):
        main(args(redis_url, redis_cluster.url))
    source = open_scheduler(settings(redis_url))
    try:
        assert len(source) == 400  # nothing moved: the refusal came first
    finally:
        source.close("finished")
        source.stop_timers()
    assert [key for key in cluster.keys("*") if b"requests" in key] == []


def test_requests_due_later_move_into_their_slots_lanes_on_the_cluster(
    redis_url, server, redis_cluster, cluster, schedulers, capsys
):
    """A kept crawl (no fleet limits) with requests due later, moved into a cluster whose
    workers queue per download slot: each due request waits in its slot's lane, and
    comes due there by the cluster's clock."""
    scheduler = open_scheduler(settings(redis_url))
    hosts = [f"http://h{n}.test/" for n in range(9)]
    for url in hosts:
        scheduler.enqueue_request(Request(url, meta={"due_in": 1}))
    scheduler.enqueue_request(Request("http://h0.test/hour", meta={"due_in": 3600}))
    assert scheduler.send_enqueued()
    scheduler.close("shutdown")
    scheduler.stop_timers()
    fleet = ["-s", "SCHEDULER_FLEET_LIMITS=True"]
    assert main([*args(redis_url, redis_cluster.url, "--delete-source"), *fleet]) == 0
    assert "Moved 10 requests (10 due later)" in capsys.readouterr().out
    assert server.keys("*") == []
    target = schedulers({**settings(redis_cluster.url), "SCHEDULER_FLEET_LIMITS": True})
    due = target._parts.buffer.due
    assert len(due.keys) == 3 and sum(cluster.zcard(key) for key in due.keys) == 10
    for lane, key in enumerate(due.keys):  # each in its slot's lane
        assert all(due.lane_of_member(member) == lane for member in cluster.zrange(key, 0, -1))
    deadline = time.monotonic() + 30
    fetched: list[str] = []
    while len(fetched) < len(hosts):
        assert time.monotonic() < deadline, fetched
        fetched += [r.url for r in iter(target.next_request, None)]
        time.sleep(0.05)
    assert sorted(fetched) == sorted(hosts)
    assert sum(cluster.zcard(key) for key in due.keys) == 1  # the one due in an hour
    target.flush()


def test_a_kept_crawl_moves_into_slot_lanes_each_slot_in_one_lane_its_pages_known(
    redis_url, server, redis_cluster, cluster, schedulers, capsys
):
    """Into a cluster whose workers queue per download slot: the scheduler keeps a slot's
    requests, and their fingerprints, in the slot's lane; a move must too."""
    from scrapy_redis.politeness.queue import member_slot, queued_members

    scheduler = open_scheduler(settings(redis_url))
    crawled = [f"http://h{n % 6}.test/done/{n}" for n in range(30)]
    queued = [f"http://h{n % 6}.test/{n}" for n in range(30)]
    for url in crawled:
        scheduler.enqueue_request(Request(url, priority=5))
    for url in queued:
        scheduler.enqueue_request(Request(url))
    assert scheduler.send_enqueued()
    assert len([scheduler.next_request() for _ in crawled]) == len(crawled)  # priority 5
    scheduler.close("shutdown")
    scheduler.stop_timers()
    server.delete(*server.keys("demo:requests*"))  # what the crawl fetched is gone
    for url in queued:  # (queued again: the fingerprints stay)
        scheduler.queue.push(Request(url))
    fleet = ["-s", "SCHEDULER_FLEET_LIMITS=True"]
    assert main([*args(redis_url, redis_cluster.url, "--delete-source"), *fleet]) == 0
    target = schedulers({**settings(redis_cluster.url), "SCHEDULER_FLEET_LIMITS": True})
    lanes_of: dict[str, set[int]] = {}
    for number, lane in enumerate(target.queue.lanes):
        for member in queued_members(cluster, lane.key, lane.on_cluster):
            lanes_of.setdefault(member_slot(member), set()).add(number)
    assert len(lanes_of) == 6 and all(len(lanes) == 1 for lanes in lanes_of.values())
    for url in crawled:
        target.enqueue_request(Request(url))
    assert target.send_enqueued()
    assert target.stats.get_value("dupefilter/filtered") == len(crawled)  # known in any lane
    target.flush()


def test_recurring_start_messages_move_under_the_targets_names(
    redis_url, server, redis_cluster, cluster, capsys
):
    """A kept crawl's recurring start messages move too, named as the cluster names them
    ({demo:start_urls}:recurring), each keeping its next run and interval."""
    from scrapy_redis.fleet.recurring import push_recurring

    a_kept_crawl(redis_url, server)
    push_recurring(server, "demo:start_urls", ["http://example.com/feed"], 3600)
    runs = server.zrange("demo:start_urls:recurring", 0, -1, withscores=True)
    every = server.hgetall("demo:start_urls:recurring:every")
    assert runs and every
    assert main(args(redis_url, redis_cluster.url, "--delete-source")) == 0
    out = capsys.readouterr().out
    assert "{demo:start_urls}:recurring, {demo:start_urls}:recurring:every" in out
    assert cluster.zrange("{demo:start_urls}:recurring", 0, -1, withscores=True) == runs
    assert cluster.hgetall("{demo:start_urls}:recurring:every") == every
    assert not server.exists("demo:start_urls:recurring", "demo:start_urls:recurring:every")


def test_recurring_start_messages_on_the_target_are_refused_before_anything_moves(
    redis_url, server, redis_cluster, cluster
):
    from scrapy_redis.fleet.recurring import push_recurring

    a_kept_crawl(redis_url, server)
    push_recurring(server, "demo:start_urls", ["http://example.com/feed"], 3600)
    cluster.hset("{demo:start_urls}:recurring:every", "http://example.com/other", 1000)
    with pytest.raises(SystemExit, match=r"\{demo:start_urls\}:recurring:every exists on the"):
        main(args(redis_url, redis_cluster.url))
    assert server.zcard("demo:start_urls:recurring") == 1


def test_a_spider_with_its_own_redis_key_moves_its_start_keys_and_recurring_messages(
    tmp_path, redis_url, server, redis_cluster, cluster
):
    """As a user runs it, from the project: the move copies the start keys the project's
    spider reads (its own redis_key), and their recurring messages."""
    import os
    import subprocess
    import sys

    from scrapy_redis.fleet.recurring import push_recurring
    from test_commands import write_project

    project = write_project(tmp_path, redis_url)
    spiders = project.path / "proj" / "spiders" / "__init__.py"
    spiders.write_text(spiders.read_text().replace(
        'name = "demo"\n', 'name = "demo"\n    redis_key = "feeds:%(name)s"\n'
    ))  # fmt: skip
    server.rpush("feeds:demo", "http://example.com/a")
    push_recurring(server, "feeds:demo", ["http://example.com/feed"], 3600)
    env = {**os.environ, "REDIS_URL": redis_url}
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    command = [sys.executable, "-m", "scrapy_redis.move_crawl", "demo", "--from", redis_url]
    command += ["--to", redis_cluster.url]
    moved = subprocess.run(command, cwd=project.path, env=env, capture_output=True, text=True)
    assert moved.returncode == 0, moved.stderr
    assert "feeds:demo, " in moved.stdout and "{feeds:demo}:recurring" in moved.stdout
    assert cluster.lrange("feeds:demo", 0, -1) == [b"http://example.com/a"]
    assert cluster.zcard("{feeds:demo}:recurring") == 1
