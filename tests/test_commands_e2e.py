"""``scrapy redis status``, ``watch`` and ``push`` against a real crawl: a ``scrapy crawl``
worker of example-project's ``myspider_redis`` crawls the demo site while the commands
run in the same project (see tests/test_e2e.py for the workers and the site)."""

from __future__ import annotations

import json
import time

import pytest

from helpers import scrapy_redis
from test_e2e import DOMAIN, DemoSite, start_worker, wait_all, wait_for_requests

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def status_of(redis_url: str) -> dict:
    result = scrapy_redis(redis_url, "status", "myspider_redis", "--json")
    assert result.returncode == 0, result.stderr
    (status,) = json.loads(result.stdout)["spiders"]
    return status


def test_status_and_watch_during_and_after_a_crawl(server, redis_url, tmp_path):
    with DemoSite(pages=150) as site:
        settings = {
            "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
            "DOWNLOAD_DELAY": 0.02,
            "STATS_CLASS": "scrapy_redis.stats.RedisStatsCollector",
        }
        site.hold_after(60)  # the crawl runs on until the commands below have looked at it
        worker = start_worker("myspider_redis", redis_url, tmp_path / "w.log", settings, DOMAIN)
        pushed = scrapy_redis(redis_url, "push", "myspider_redis", site.url)
        assert pushed.returncode == 0, pushed.stderr
        wait_for_requests(site, 40, worker)

        during = status_of(redis_url)
        for _ in range(10):  # its rates are in its stats hash from its second stats write
            if any(w["pages_per_second"] for w in during["workers"]):
                break
            during = status_of(redis_url)
        text = scrapy_redis(redis_url, "status", "myspider_redis").stdout
        watched = scrapy_redis(
            redis_url, "watch", "myspider_redis", "--count", "2", "--interval", "0.1", "--json"
        )
        site.release()
        wait_all([worker])
        after = status_of(redis_url)
        pages = sum(site.snapshot().values())
        items, fingerprints = (
            server.llen("myspider_redis:items"),
            server.scard("myspider_redis:dupefilter"),
        )
        purged = scrapy_redis(redis_url, "purge", "myspider_redis", "--all", "--yes")

    (alive,) = [w for w in during["workers"] if w["alive"]]
    assert 0 <= alive["heartbeat_age"] < 15
    assert alive["pages_per_second"] > 0  # from its own stats hash
    assert "pages/s" in text
    assert during["queued"] + during["leased"] > 0
    assert during["leased"] == alive["leased"]
    assert during["fingerprints"] > 40
    assert during["start_keys"] == ["myspider:start_urls"]
    assert during["diagnosis"] is None
    assert f"{alive['id']}  alive  heartbeat" in text
    assert "myspider_redis (PriorityQueue myspider_redis:requests)" in text
    lines = [json.loads(line) for line in watched.stdout.splitlines()]
    assert len(lines) == 2 and lines[0]["spiders"][0]["spider"] == "myspider_redis"
    assert after["workers_alive"] == 0
    assert (after["queued"], after["leased"], after["start_pending"]) == (0, 0, 0)
    assert after["items"] == items > 0
    assert after["fingerprints"] == fingerprints > 100
    assert pages > 100
    assert purged.returncode == 0, purged.stderr
    assert server.keys() == []


def wait_expired(server, queue: str, timeout: float = 60) -> None:
    """Wait until every worker's registry deadline and every lease deadline of ``queue``
    has passed on the server's clock (a dead worker's: SCHEDULER_WORKER_TIMEOUT)."""
    deadline = time.monotonic() + timeout
    while True:
        seconds, micros = server.time()
        now_ms = seconds * 1000 + micros // 1000
        workers = [int(value) for value in server.hvals(f"{queue}:workers")]
        leases = server.zrange(f"{queue}:lease_deadlines", -1, -1, withscores=True)
        if all(value < now_ms for value in workers) and all(s < now_ms for _, s in leases):
            return
        assert time.monotonic() < deadline, f"nothing expired in {timeout}s"
        time.sleep(0.05)


def test_a_killed_workers_requests_requeued_exported_and_crawled(server, redis_url, tmp_path):
    """A worker killed mid-crawl: ``status`` says why nothing moves, ``requeue --expired``
    puts back what it held, ``export queue`` lists it, a new worker crawls it, and
    ``export items`` writes every item stored."""
    settings = {
        "SCHEDULER_PERSIST": True,
        "SCHEDULER_WORKER_TIMEOUT": 2,
        "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
        "DOWNLOAD_DELAY": 0.05,
    }
    with DemoSite(pages=150) as site:
        killed = start_worker("myspider_redis", redis_url, tmp_path / "k.log", settings, DOMAIN)
        assert scrapy_redis(redis_url, "push", "myspider_redis", site.url).returncode == 0
        wait_for_requests(site, 20, killed)
        killed.process.kill()
        killed.process.wait(10)
        wait_expired(server, "myspider_redis:requests")  # its registry entry and its leases
        before = status_of(redis_url)
        requeued = scrapy_redis(redis_url, "requeue", "myspider_redis", "--expired", "--json")
        after = status_of(redis_url)
        exported = scrapy_redis(redis_url, "export", "myspider_redis", "queue")
        finisher = start_worker("myspider_redis", redis_url, tmp_path / "f.log", settings, DOMAIN)
        wait_all([finisher])
        items = scrapy_redis(redis_url, "export", "myspider_redis", "items")

    assert before["workers_alive"] == 0 and before["leased"] > 0 and before["expired_leases"]
    assert "no worker is alive" in before["diagnosis"]
    assert requeued.returncode == 0, requeued.stderr
    assert json.loads(requeued.stdout)["expired"]["requeued"] == before["leased"]
    assert (after["leased"], after["queued"]) == (0, before["queued"] + before["leased"])
    requests = [json.loads(line) for line in exported.stdout.splitlines()]
    assert len(requests) == after["queued"]
    assert all(request["url"].startswith(site.url) for request in requests)
    lines = items.stdout.splitlines()
    assert items.returncode == 0 and len(lines) == server.llen("myspider_redis:items") > 100
    assert all(json.loads(line)["url"] for line in lines)
