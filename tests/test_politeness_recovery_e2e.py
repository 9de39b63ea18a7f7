"""End-to-end: a polite crawl (SCHEDULER_FLEET_LIMITS, 4 real ``scrapy runspider``
workers, three sites on 127.0.0.2-4) rides out a Redis restart and a failover on the real
cluster: every page fetched, and no site sees two requests closer than 0.9 x the delay
across the recovery."""

from __future__ import annotations

import time

import pytest
import redis

from polite_site import ADDRESSES, PoliteSites
from redis_server import RedisServer
from test_e2e import wait_all
from test_politeness_e2e import NO_JITTER, PAGES, expected_paths, fleet

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

DELAY = 0.3
SETTINGS = {
    "SCHEDULER_FLEET_LIMITS": True,
    "DOWNLOAD_DELAY": DELAY,
    **NO_JITTER,
    "SCHEDULER_WORKER_TIMEOUT": 6,  # leases lost with a server come back soon
}


@pytest.fixture
def own_server():
    """A redis-server of this test only (appendonly), so that it can be restarted."""
    server = RedisServer("--appendonly", "yes").start()
    yield server
    server.cleanup()


def wait_served(sites: PoliteSites, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while sites.served() < count:
        assert time.monotonic() < deadline, f"fewer than {count} requests served"
        time.sleep(0.02)


def wait_noticed(workers, timeout: float = 60) -> None:
    """Until a worker said Redis is unreachable (while it is down)."""
    deadline = time.monotonic() + timeout
    while not any("Redis is unreachable" in w.log_path.read_text() for w in workers):
        assert time.monotonic() < deadline, "no worker saw Redis go away"
        time.sleep(0.05)


def assert_every_page_and_the_delay(sites: PoliteSites, around: float) -> None:
    """Every page fetched (some perhaps twice: a lease recovered), no two requests to one
    site closer than 0.9 x DELAY; and some requests came after ``around`` (monotonic)."""
    for address in sites.addresses:
        assert set(sites.paths(address)) == set(expected_paths()), address
        gaps = sites.gaps(address)
        assert min(gaps) >= 0.9 * DELAY, (address, sorted(gaps)[:5])
        assert max(sites.times(address)) > around, address  # the crawl went on after


def test_a_redis_restart_loses_nothing_and_the_delays_hold(own_server, tmp_path):
    client = redis.Redis.from_url(own_server.url)
    with PoliteSites(ADDRESSES, pages=PAGES) as sites:
        workers = fleet(client, own_server.url, tmp_path, SETTINGS, sites)
        wait_served(sites, len(ADDRESSES) * PAGES // 3)
        own_server.stop()  # SIGTERM: redis-server writes its AOF and exits
        wait_noticed(workers)  # (a quick restart could pass unseen, inside a retry)
        own_server.start()  # same port, same data
        restarted = time.monotonic()
        wait_all(workers)
    assert_every_page_and_the_delay(sites, restarted)
    assert any("Redis is unreachable" in worker.log for worker in workers)
    assert client.keys("polite:*") == []
    client.close()


def test_a_cluster_failover_loses_nothing_and_the_delays_hold(redis_cluster, cluster, tmp_path):
    key = "{polite:requests}:workers"
    with PoliteSites(ADDRESSES, pages=PAGES) as sites:
        workers = fleet(cluster, redis_cluster.url, tmp_path, SETTINGS, sites, key=key)
        wait_served(sites, len(ADDRESSES) * PAGES // 3)
        redis_cluster.fail_over(redis_cluster.master_of("polite:requests"))
        failed_over = time.monotonic()
        wait_all(workers)
    assert_every_page_and_the_delay(sites, failed_over)
