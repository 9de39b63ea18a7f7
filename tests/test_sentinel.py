"""Redis Sentinel: a ``redis+sentinel://`` REDIS_URL, every component through the
sentinels, and a failover (kill -9 of the master) ridden out as an outage.

The deployments are real: a master, a replica and three sentinels, all started here
(tests/sentinel_servers.py).
"""

from __future__ import annotations

import json
import logging
import re

import pytest
import redis
from redis.sentinel import MasterNotFoundError
from scrapy import Request
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from helpers import DemoSpider, guard_clock, open_scheduler, use_every_component
from redis_server import in_ci
from scrapy_redis import connection
from scrapy_redis.exceptions import ConfigurationError, RedisUnavailableError
from scrapy_redis.store.outage import OUTAGE_ERRORS, OutageGuard
from scrapy_redis.store.sentinel import parse_sentinel_url
from sentinel_servers import MASTER_NAME, SentinelDeployment
from tls_servers import Certificates, make_certificates

pytestmark = pytest.mark.timeout(120)


def start_deployment(certs: Certificates | None = None) -> SentinelDeployment:
    deployment = SentinelDeployment(certs)
    try:
        return deployment.start()
    except (RuntimeError, OSError) as exc:
        deployment.cleanup()
        if in_ci():
            raise
        pytest.skip(f"no Redis Sentinel deployment: {exc}")


@pytest.fixture(scope="module")
def deployment():
    """One master, replica and three sentinels for the tests that do not fail over."""
    deployment = start_deployment()
    yield deployment
    deployment.cleanup()


@pytest.fixture
def sentinel_url(deployment):
    with deployment.master_client() as master:
        master.flushdb()
    yield deployment.url()
    with deployment.master_client() as master:
        master.flushdb()


@pytest.fixture
def failing_over():
    """A deployment of this test only: its master is killed."""
    deployment = start_deployment()
    yield deployment
    deployment.cleanup()


# -- the URL ------------------------------------------------------------------------------


def test_the_url_names_sentinels_master_db_and_options():
    url = (
        "redis+sentinel://u:p%40ss@s1:26380,s2,[::1]:26381/cache/3"
        "?socket_timeout=4&sentinel_password=sp&sentinel_socket_timeout=0.5"
    )
    parsed = parse_sentinel_url(url)
    assert parsed.sentinels == [("s1", 26380), ("s2", 26379), ("::1", 26381)]
    assert parsed.master == "cache"
    assert parsed.tls is False
    assert parsed.master_kwargs == {
        "username": "u",
        "password": "p@ss",
        "db": 3,
        "socket_timeout": 4.0,
    }
    assert parsed.sentinel_kwargs == {"password": "sp", "socket_timeout": 0.5}
    assert parse_sentinel_url("rediss+sentinel://s1/m").tls is True
    assert parse_sentinel_url("redis+sentinel://s1/m").master_kwargs == {}


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://s1:26379",
        "redis+sentinel:///m",
        "redis+sentinel://s1:x/m",
        "redis+sentinel://s/m/0/1",
    ],
)
def test_a_malformed_url_is_refused_naming_the_setting_and_the_form(url):
    with pytest.raises(ConfigurationError, match=r"REDIS_URL .* redis\+sentinel://host:port"):
        connection.get_redis_from_settings(Settings({"REDIS_URL": url}))


def test_the_password_is_masked_in_errors():
    with pytest.raises(ConfigurationError) as error:
        parse_sentinel_url("redis+sentinel://user:s3cret@s1:26379")
    assert "s3cret" not in str(error.value)
    assert "user:***@s1" in str(error.value)


def test_sentinel_params_need_a_sentinel_url():
    settings = {"REDIS_URL": "redis://localhost:6379", "REDIS_SENTINEL_PARAMS": {"password": "x"}}
    with pytest.raises(ConfigurationError, match="REDIS_SENTINEL_PARAMS is set, but REDIS_URL"):
        connection.get_redis_from_settings(Settings(settings))


def test_a_cluster_client_class_is_refused():
    settings = {
        "REDIS_URL": "redis+sentinel://s1/m",
        "REDIS_PARAMS": {"redis_cls": "redis.cluster.RedisCluster"},
    }
    with pytest.raises(ConfigurationError, match=r'REDIS_PARAMS\["redis_cls"\]'):
        connection.get_redis_from_settings(Settings(settings))


def test_settings_reach_the_master_and_the_sentinels():
    settings = {
        "REDIS_URL": "redis+sentinel://:pw@s1:1,s2:2/m/2?sentinel_username=watcher",
        "REDIS_PARAMS": {"socket_timeout": 3},
        "REDIS_SENTINEL_PARAMS": {"password": "spw", "socket_timeout": 1},
        "REDIS_DB": 5,  # the URL's database wins
    }
    client = connection.get_redis_from_settings(Settings(settings))
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["password"], kwargs["db"], kwargs["socket_timeout"]) == ("pw", 2, 3)
    assert kwargs["retry"].get_retries() == 1
    sentinel = client.connection_pool.sentinel_manager.sentinels[1]
    sentinel_kwargs = sentinel.connection_pool.connection_kwargs
    assert (sentinel_kwargs["host"], sentinel_kwargs["port"]) == ("s2", 2)
    assert sentinel_kwargs["username"] == "watcher"
    assert sentinel_kwargs["password"] == "spw"
    assert sentinel_kwargs["socket_timeout"] == 1
    assert sentinel_kwargs["socket_connect_timeout"] == 2  # the default kept
    assert connection.describe_server(client) == "redis+sentinel://:***@s1:1,s2:2/m/2"
    client.close()


def test_tls_reaches_the_master_and_the_sentinels():
    url = "rediss+sentinel://s1/m?ssl_ca_certs=/ca.crt"
    client = connection.get_redis_from_settings(Settings({"REDIS_URL": url}))
    pool = client.connection_pool
    assert issubclass(pool.connection_class, redis.SSLConnection)
    assert pool.connection_kwargs["ssl_ca_certs"] == "/ca.crt"
    sentinel_pool = pool.sentinel_manager.sentinels[0].connection_pool
    assert issubclass(sentinel_pool.connection_class, redis.SSLConnection)
    assert sentinel_pool.connection_kwargs["ssl_ca_certs"] == "/ca.crt"
    assert connection.describe_server(client) == "rediss+sentinel://s1:26379/m/0"
    client.close()


def test_master_not_found_is_an_outage_error():
    assert issubclass(MasterNotFoundError, OUTAGE_ERRORS)


# -- a running deployment -----------------------------------------------------------------


def test_an_unknown_master_gives_one_clear_error(deployment):
    url = deployment.url().replace(f"/{MASTER_NAME}/", "/nosuchmaster/")
    crawler = get_crawler(DemoSpider, {"REDIS_URL": url})
    with pytest.raises(RedisUnavailableError) as error:
        connection.get_redis_from_crawler(crawler)
    message = str(error.value)
    assert f"Cannot connect to Redis at {url}: No master found for 'nosuchmaster'" in message
    assert "know the master by that name" in message


def test_every_component_works_through_the_sentinels(deployment, sentinel_url):
    with deployment.master_client() as master:
        use_every_component({"REDIS_URL": sentinel_url}, master)
    client = connection.get_redis_from_settings(Settings({"REDIS_URL": sentinel_url}))
    assert connection.describe_server(client) == sentinel_url
    client.close()


def test_every_component_through_sentinels_over_tls(tmp_path):
    """``rediss+sentinel://``: TLS to the sentinels and to the master, one CA for both
    (master, replica and sentinels listen only on TLS ports)."""
    try:
        certs = make_certificates(tmp_path)
    except (RuntimeError, OSError) as exc:
        if in_ci():
            raise
        pytest.skip(f"cannot make certificates: {exc}")
    deployment = start_deployment(certs)
    try:
        url = f"{deployment.url(scheme='rediss+sentinel')}?ssl_ca_certs={certs.ca}"
        with deployment.master_client() as master:
            use_every_component({"REDIS_URL": url}, master)
        client = connection.get_redis_from_settings(Settings({"REDIS_URL": url}))
        assert connection.describe_server(client) == url.partition("?")[0]
        client.close()
    finally:
        deployment.cleanup()


def test_a_failover_is_ridden_out_and_forgets_the_seen_cache(failing_over, caplog):
    """kill -9 of the master: calls fail (ConnectionError, MasterNotFoundError) while the
    sentinels elect the replica; the scheduler keeps its work in memory, then reaches
    the new master, whose identity differs, so what it remembered is dropped."""
    settings = {"REDIS_URL": failing_over.url(), "SCHEDULER_PERSIST": True}
    scheduler = open_scheduler(settings)
    clock = guard_clock(scheduler)
    identity = connection.server_identity(scheduler.server)
    scheduler.enqueue_request(Request("http://example.com/before"))
    assert scheduler.next_request().url == "http://example.com/before"
    changes = identity.changes

    failing_over.kill_master()
    with caplog.at_level(logging.WARNING):
        assert scheduler.enqueue_request(Request("http://example.com/during")) is True
        assert scheduler.next_request() is None
        assert scheduler.has_pending_requests()
    assert caplog.text.count("Redis is unreachable") == 1
    failing_over.wait_failover()

    clock.advance(OutageGuard.MAX_BACKOFF)
    with caplog.at_level(logging.WARNING):
        assert scheduler.next_request().url == "http://example.com/during"
    assert "Redis is reachable again" in caplog.text
    assert identity.changes > changes  # another server: the seen cache is dropped
    assert scheduler.server.connection_pool.get_master_address()[1] == failing_over.replica.port
    scheduler.close("finished")


# -- a failover under a running crawl -----------------------------------------------------


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_two_workers_ride_out_a_failover_and_crawl_every_page(failing_over, tmp_path):
    """kill -9 of the master while two ``scrapy crawl`` workers run: they ride out the
    outage, carry on with the promoted replica and finish the crawl; every page is
    fetched and every item stored at least once. What the failover cost (pages
    fetched twice, items stored twice) is printed (``pytest -s``)."""
    from test_e2e import (
        DOMAIN,
        IDLE,
        PAGES,
        DemoSite,
        expected_hits,
        expected_pages,
        start_worker,
        wait_all,
        wait_for_requests,
    )

    url = failing_over.url()
    with failing_over.master_client() as master, DemoSite(pages=PAGES) as site:
        master.lpush("myspider:start_urls", json.dumps({"url": site.url}))
        settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": IDLE, "SCHEDULER_PERSIST": True}
        workers = [
            start_worker("myspider_redis", url, tmp_path / f"w{n}.log", settings, DOMAIN)
            for n in (1, 2)
        ]
        wait_for_requests(site, PAGES // 3, workers[0])
        failing_over.kill_master()
        served_at_kill = sum(site.snapshot().values())
        failover_seconds = failing_over.wait_failover()
        wait_all(workers)
        hits = site.snapshot()

    with failing_over.master_client() as master:
        items = [json.loads(raw)["url"] for raw in master.lrange("myspider_redis:items", 0, -1)]
    missed = sorted(set(expected_hits(PAGES)) - set(hits))
    assert not missed, f"{len(missed)} paths never fetched, e.g. {missed[:20]}"
    base = site.url.rstrip("/")
    assert set(items) == {base + path for path in expected_pages(PAGES)}
    twice = {path: n for path, n in hits.items() if path.startswith("/p/") and n > 1}
    outages = [
        float(seconds)
        for worker in workers
        for seconds in re.findall(r"Redis is reachable again after ([0-9.]+)s", worker.log)
    ]
    assert outages, "no worker saw the failover"
    print(
        f"\nfailover: {served_at_kill} requests served at the kill; sentinels promoted the"
        f" replica {failover_seconds:.1f}s after the wait began; outages seen by the workers"
        f" {outages}s; pages fetched twice: {len(twice)} of {PAGES}; items stored twice:"
        f" {len(items) - len(set(items))} of {len(set(items))}"
    )
