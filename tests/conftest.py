"""Test fixtures: a real redis-server started by the test session, a clean database per test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import redis

sys.path.insert(0, str(Path(__file__).parent))

from redis_cluster import RedisClusterNodes, running
from redis_server import RedisServer, in_ci, redisbloom_module


def pytest_configure(config):
    from helpers import ensure_reactor

    ensure_reactor()


def pytest_unconfigure(config):
    """Close the event loop of the asyncio reactor installed above."""
    reactor = sys.modules.get("twisted.internet.reactor")
    loop = getattr(reactor, "_asyncioEventloop", None)
    if loop is not None and not loop.is_closed():
        loop.close()


@pytest.fixture(autouse=True)
def _no_worker_outlives_its_test():
    """Kill the ``scrapy crawl`` workers a test started and left running (it failed
    before waiting for them): they would crawl on and warn in a later test."""
    yield
    started = getattr(sys.modules.get("test_e2e"), "STARTED", [])
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()
    started.clear()


@pytest.fixture(scope="session")
def redis_server():
    """One redis-server for the whole session, on a free loopback port."""
    server = RedisServer()
    try:
        server.start()
    except RuntimeError as exc:
        if in_ci():
            raise
        pytest.skip(f"no redis-server: {exc}")
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def redisbloom_server():
    """A redis-server with RedisBloom's module loaded (``BF.*``), for the whole session."""
    try:
        server = RedisServer("--loadmodule", str(redisbloom_module())).start()
    except RuntimeError as exc:
        if in_ci():
            raise
        pytest.skip(f"no redis-server with RedisBloom: {exc}")
    yield server
    server.cleanup()


@pytest.fixture
def bloom_server(redisbloom_server):
    """A client of the RedisBloom server; its database is empty before and after each test."""
    yield from _emptied_client(redisbloom_server)


@pytest.fixture(scope="session")
def redis_cluster():
    """A real Redis Cluster of 6 nodes (3 masters, 3 replicas) for the whole session."""
    yield from running(RedisClusterNodes())


@pytest.fixture
def cluster(redis_cluster):
    """A cluster client; every master is flushed before and after each test."""
    from redis.cluster import RedisCluster

    redis_cluster.wait_ok()
    redis_cluster.flush()
    client = RedisCluster.from_url(f"redis://127.0.0.1:{redis_cluster.masters()[0].port}")
    yield client
    client.close()
    redis_cluster.wait_ok()
    redis_cluster.flush()


@pytest.fixture
def redis_url(redis_server):
    return redis_server.url


@pytest.fixture
def server(redis_server):
    """A client of the session server; the database is empty before and after each test."""
    yield from _emptied_client(redis_server)


def _emptied_client(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def settings_dict(redis_url):
    """Settings pointing the scrapy-redis components at the test server."""
    return {
        "REDIS_URL": redis_url,
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    }


@pytest.fixture
def schedulers():
    """Opens Redis schedulers (``schedulers(settings, cls=Scheduler, reactor=None)``); stops
    their timers."""
    from helpers import open_scheduler

    opened = []

    def make(settings, cls=None, reactor=None):
        scheduler = open_scheduler(settings, cls, reactor)
        opened.append(scheduler)
        return scheduler

    yield make
    for scheduler in opened:
        scheduler.stop_timers()  # the news listener's thread ends within NewsListener.WAIT
