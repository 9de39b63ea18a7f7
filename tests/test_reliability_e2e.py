"""Nothing lost: real workers killed, stopped and cut off from Redis mid-crawl.

Two ``mycrawler_redis`` workers of example-project crawl a local 1,000-page site
(see test_e2e.py for the site and the helpers). Requests are leased, not
deleted, when a worker pops them; these tests kill workers with SIGKILL, stop one
with SIGTERM and restart redis-server under them, and check from the site's hit
counter and from Redis that every page was still fetched and scraped.
"""

from __future__ import annotations

import json
import random
import signal
import time

import msgpack
import pytest

from redis_server import RedisServer
from test_e2e import (  # test_e2e puts example-project (demo_site) on sys.path
    DOMAIN,
    DemoSite,
    expected_hits,
    expected_pages,
    keys,
    parse_stats,
    start_worker,
    wait_all,
    wait_for_requests,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]

#: Half the e2e site (1,000 pages there): three kills and a restart still fall mid-crawl.
PAGES = 500
SPIDER = "mycrawler_redis"
LEASES = "mycrawler_redis:requests:leases"
#: Slow the workers down (the local site answers in microseconds) so that the crawl
#: lasts long enough to be interrupted several times.
SETTINGS = {
    "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
    "SCHEDULER_PERSIST": False,
    "DOWNLOAD_DELAY": 0.02,
    "SCHEDULER_WORKER_TIMEOUT": 3,
}


@pytest.fixture
def site():
    with DemoSite(pages=PAGES) as demo_site:
        yield demo_site


def leases_of(server, pid: int) -> int:
    """How many requests the worker process ``pid`` holds leased (lease ids:
    host:pid:rand:n; a lease record holds a pop's entries, False once done)."""
    return sum(
        sum(1 for entry in msgpack.unpackb(record, raw=True)[4:] if entry is not False)
        for lease_id, record in server.hgetall(LEASES).items()
        if f":{pid}:".encode() in lease_id
    )


def assert_every_page_crawled(server, site, max_extra: int) -> None:
    hits, expected = site.snapshot(), expected_hits(PAGES)
    missed = sorted(path for path in expected if path not in hits)
    assert not missed, f"{len(missed)} paths never fetched, e.g. {missed[:10]}"
    extra = {p: hits[p] - n for p, n in expected.items() if hits[p] > n}
    assert sum(extra.values()) <= max_extra, (
        f"{sum(extra.values())} extra fetches for at most {max_extra} in flight: {extra}"
    )
    items = {json.loads(raw)["url"] for raw in server.lrange(f"{SPIDER}:items", 0, -1)}
    base = site.url.rstrip("/")
    assert items == {base + path for path in expected_pages(PAGES) - {"/"}}


def test_sigkill_three_times(site, server, redis_url, tmp_path):
    """SIGKILL at random moments: the dead worker's requests come back, in time."""
    server.lpush("mycrawler:start_urls", site.url)
    rng = random.Random()
    # A request in flight at all three kills would be a dead letter at the default 3
    # deliveries (a page that kills its workers, by design): one more than the kills.
    settings = {**SETTINGS, "SCHEDULER_MAX_DELIVERIES": 4}
    workers = [
        start_worker(SPIDER, redis_url, tmp_path / f"w{n}.log", settings, DOMAIN) for n in (1, 2)
    ]
    in_flight = 0
    killed: list[int] = []
    for kill, threshold in enumerate(sorted(rng.sample(range(75, 600), 3)), start=1):
        victim = rng.randrange(2)
        wait_for_requests(site, threshold, workers[victim], timeout=120)
        pid = workers[victim].process.pid
        killed.append(pid)
        workers[victim].process.kill()
        workers[victim].process.wait()
        in_flight += leases_of(server, pid)  # left in Redis by the dead worker
        workers[victim] = start_worker(
            SPIDER, redis_url, tmp_path / f"w{victim + 1}-after-kill-{kill}.log", settings, DOMAIN
        )
    wait_all(workers)
    assert in_flight > 0, "no request was in flight at any kill"
    assert_every_page_crawled(server, site, max_extra=in_flight)
    recovered = sum(w.stats.get("scheduler/leases/recovered", 0) for w in workers)
    assert recovered >= 1
    # No leases, queue or registry left; only the write records of the killed workers
    # (see writes.py: a worker deletes its own when it closes), which expire.
    left = keys(server) - {f"{SPIDER}:items"}
    assert all(":writes:" in key and server.pttl(key) > 0 for key in left), left
    assert all(any(f":{pid}:" in key for pid in killed) for key in left), (left, killed)


def test_sigkill_loses_no_item_of_a_finished_request(server, redis_url, tmp_path):
    """Items wait in the worker to be pushed in batches: a worker killed with items in
    memory has not acknowledged the requests that produced them (a request is done
    once its items are stored), so another worker crawls them again: no item lost."""
    pages = 300
    waiting = {**SETTINGS, "REDIS_ITEMS_DELAY": 600, "REDIS_ITEMS_BATCH_SIZE": 10**6}
    with DemoSite(pages=pages) as small_site:
        server.lpush("mycrawler:start_urls", small_site.url)
        first = start_worker(SPIDER, redis_url, tmp_path / "w1.log", waiting, DOMAIN)
        wait_for_requests(small_site, 100, first, timeout=120)
        pid = first.process.pid
        first.process.kill()
        first.process.wait()
        fetched = sum(small_site.snapshot().values())
        assert server.llen(f"{SPIDER}:items") == 0  # every item was still in its memory
        # Scraped and not acknowledged (those in flight and prefetched are leased too).
        assert leases_of(server, pid) >= fetched - 1, (leases_of(server, pid), fetched)
        second = start_worker(SPIDER, redis_url, tmp_path / "w2.log", SETTINGS, DOMAIN)
        wait_all([second])
        items = {json.loads(raw)["url"] for raw in server.lrange(f"{SPIDER}:items", 0, -1)}
        base = small_site.url.rstrip("/")
        assert items == {base + path for path in expected_pages(pages) - {"/"}}
    assert second.stats.get("scheduler/leases/recovered", 0) >= 100


def test_sigterm_then_restart_returns_work_at_once(site, server, redis_url, tmp_path):
    """A graceful stop leaves no lease behind: a restart need not wait for expiry."""
    settings = {**SETTINGS, "SCHEDULER_WORKER_TIMEOUT": 120}  # expiry would stall the crawl
    server.lpush("mycrawler:start_urls", site.url)
    first = start_worker(SPIDER, redis_url, tmp_path / "first.log", settings, DOMAIN)
    second = start_worker(SPIDER, redis_url, tmp_path / "second.log", settings, DOMAIN)
    wait_for_requests(site, 200, first, timeout=120)
    pid = first.process.pid
    first.process.send_signal(signal.SIGTERM)
    wait_all([first], finish_reason="shutdown")
    assert leases_of(server, pid) == 0
    started = time.monotonic()
    restarted = start_worker(SPIDER, redis_url, tmp_path / "restarted.log", settings, DOMAIN)
    wait_all([second, restarted])
    assert time.monotonic() - started < 100  # well under the 120 s lease timeout
    assert_every_page_crawled(server, site, max_extra=0)
    assert keys(server) == {f"{SPIDER}:items"}


def wait_in_logs(workers, text: str, timeout: float = 120) -> None:
    """Wait until a worker's log has ``text`` (logs are files written as they run)."""
    deadline = time.monotonic() + timeout
    while not any(text in w.log_path.read_text(errors="replace") for w in workers):
        assert time.monotonic() < deadline, f"no worker logged {text!r} in {timeout}s"
        time.sleep(0.05)


def test_redis_restarted_mid_crawl(site, tmp_path):
    """redis-server (appendonly) restarted under two workers: the crawl completes."""
    redis = RedisServer("--appendonly", "yes").start()
    try:
        client = __import__("redis").Redis.from_url(redis.url)
        client.lpush("mycrawler:start_urls", site.url)
        workers = [
            start_worker(SPIDER, redis.url, tmp_path / f"w{n}.log", SETTINGS, DOMAIN)
            for n in (1, 2)
        ]
        wait_for_requests(site, 250, workers[0], timeout=120)
        redis.stop()
        wait_in_logs(workers, "Redis is unreachable")  # the outage noticed, then ended
        redis.start()
        wait_all(workers)
        assert_every_page_crawled(client, site, max_extra=40)
        logs = "".join(worker.log for worker in workers)
        assert "Redis is unreachable" in logs and "Redis is reachable again" in logs
        assert keys(client) == {f"{SPIDER}:items"}
    finally:
        redis.cleanup()


def test_no_lease_left_whatever_way_requests_leave(server, redis_url, tmp_path):
    """Errbacks, callback exceptions, IgnoreRequest, offsite, retries: every lease is released."""
    import subprocess
    import sys
    from pathlib import Path

    spider_file = Path(__file__).parent / "spiders" / "residue_spider.py"
    with DemoSite(pages=300) as site:
        server.lpush("residue:start_urls", site.url)
        command = [
            sys.executable,
            "-m",
            "scrapy",
            "runspider",
            str(spider_file),
            "-s",
            f"REDIS_URL={redis_url}",
            "-s",
            "LOG_LEVEL=INFO",
        ]
        logs = []
        processes = []
        for n in (1, 2):
            logs.append(tmp_path / f"residue-{n}.log")
            with logs[-1].open("wb") as log:
                processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
        for process in processes:
            process.wait(180)
        text = "".join(path.read_text() for path in logs)
        assert all(process.returncode == 0 for process in processes), text[-3000:]
    assert "callback failure" in text
    stats = [parse_stats(path.read_text()) for path in logs]
    total = {
        key: sum(s.get(key, 0) for s in stats)
        for key in (
            "scheduler/leases/leased",
            "scheduler/leases/acked",
            "scheduler/leases/returned",
            "spider_exceptions/ValueError",
            "residue/errbacks",
            "offsite/filtered",
            "downloader/exception_type_count/scrapy.exceptions.IgnoreRequest",
        )
    }
    assert total["spider_exceptions/ValueError"] > 0, total
    assert total["residue/errbacks"] > 0, total
    assert total["offsite/filtered"] > 0, total
    assert total["downloader/exception_type_count/scrapy.exceptions.IgnoreRequest"] > 0, total
    assert total["scheduler/leases/leased"] == total["scheduler/leases/acked"] > 0, total
    assert total["scheduler/leases/returned"] == 0, total
    left = keys(server)
    assert not {key for key in left if "lease" in key}, left
    assert left == {"residue:dupefilter"}, left  # queue drained, nothing leased


@pytest.mark.parametrize(("setting", "status"), [(None, 3), ("0", 0)])
def test_a_crawl_stopped_for_an_operator_exits_non_zero(
    server, redis_url, tmp_path, setting, status
):
    """A queue in the original's pickle format, read with the safe serializer: the worker
    stops itself (``scheduler_serializer_error``) and ``scrapy crawl`` says so with its
    exit status, SCHEDULER_STOP_EXIT_CODE (0: Scrapy's own status)."""
    import pickle

    queue = "myspider_redis:requests"
    server.lpush(queue, pickle.dumps({"url": "http://127.0.0.1:9/", "method": "GET"}, protocol=5))
    settings = {"SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueue"}
    if setting is not None:
        settings["SCHEDULER_STOP_EXIT_CODE"] = setting
    worker = start_worker("myspider_redis", redis_url, tmp_path / "w.log", settings, DOMAIN)
    try:
        worker.process.wait(120)
    finally:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()
    worker.log = worker.log_path.read_text(encoding="utf-8", errors="replace")
    assert worker.stats.get("finish_reason") == "scheduler_serializer_error", worker.describe()
    assert worker.process.returncode == status, worker.describe()
    assert server.llen(queue) == 1  # the entry kept for an operator
