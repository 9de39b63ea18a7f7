"""TLS: every component on a redis-server that speaks only TLS, configured the ways a user
would write it (the CA in the URL or in REDIS_PARAMS, client certificates when the server
requires them), clear errors when a certificate is missing, and a crawl over TLS.

The CA and the certificates are made by ``openssl`` for this session (tests/tls_servers.py).
"""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from helpers import DemoSpider, use_every_component
from redis_server import in_ci
from scrapy_redis import connection
from scrapy_redis.exceptions import RedisUnavailableError
from tls_servers import TLSRedisServer, make_certificates

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    try:
        return make_certificates(tmp_path_factory.mktemp("tls"))
    except (RuntimeError, OSError) as exc:
        if in_ci():
            raise
        pytest.skip(f"cannot make certificates: {exc}")


def start(certs, client_auth: bool):
    try:
        return TLSRedisServer(certs, client_auth=client_auth).start()
    except RuntimeError as exc:  # a redis-server built without TLS
        if in_ci():
            raise
        pytest.skip(f"no redis-server with TLS: {exc}")


@pytest.fixture(scope="module")
def tls_server(certs):
    """TLS only (``--port 0 --tls-port``); clients need the CA, not a certificate."""
    server = start(certs, client_auth=False)
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def mtls_server(certs):
    """TLS only, and clients must show a certificate signed by the CA."""
    server = start(certs, client_auth=True)
    yield server
    server.cleanup()


def clean(server):
    """A test client of ``server``, its database emptied."""
    client = server.client()
    client.flushdb()
    return client


def with_query(url: str, **options: str) -> str:
    return f"{url}?{urlencode(options)}"


def test_every_component_with_the_ca_in_the_url(tls_server):
    with clean(tls_server) as client:
        url = with_query(tls_server.url, ssl_ca_certs=str(tls_server.certs.ca))
        use_every_component({"REDIS_URL": url}, client)


def test_every_component_with_the_ca_in_redis_params(tls_server):
    settings = {
        "REDIS_URL": tls_server.url,
        "REDIS_PARAMS": {"ssl_ca_certs": str(tls_server.certs.ca)},
    }
    with clean(tls_server) as client:
        use_every_component(settings, client)


def test_every_component_with_host_port_and_ssl_in_redis_params(tls_server):
    settings = {
        "REDIS_HOST": "127.0.0.1",
        "REDIS_PORT": tls_server.port,
        "REDIS_PARAMS": {"ssl": True, "ssl_ca_certs": str(tls_server.certs.ca)},
    }
    with clean(tls_server) as client:
        use_every_component(settings, client)


def test_every_component_with_client_certificates_in_the_url(mtls_server):
    url = with_query(mtls_server.url, **mtls_server.client_options())
    with clean(mtls_server) as client:
        use_every_component({"REDIS_URL": url}, client)


def test_every_component_with_client_certificates_in_redis_params(mtls_server):
    settings = {"REDIS_URL": mtls_server.url, "REDIS_PARAMS": mtls_server.client_options()}
    with clean(mtls_server) as client:
        use_every_component(settings, client)


def test_the_server_is_named_rediss_and_its_identity_is_read(tls_server):
    settings = {"REDIS_URL": tls_server.url, "REDIS_PARAMS": tls_server.client_options()}
    client = connection.get_redis_from_crawler(get_crawler(DemoSpider, settings))
    assert connection.describe_server(client) == f"rediss://127.0.0.1:{tls_server.port}/0"
    identity = connection.server_identity(client)
    assert identity.changes == 0
    assert identity._last is not None  # run_id read on the TLS connection


def unreachable_message(settings: dict) -> str:
    with pytest.raises(RedisUnavailableError) as error:
        connection.get_redis_from_crawler(get_crawler(DemoSpider, settings))
    return str(error.value)


def test_an_untrusted_certificate_names_the_server_and_ssl_ca_certs(tls_server):
    message = unreachable_message({"REDIS_URL": tls_server.url})
    assert f"Cannot connect to Redis at rediss://127.0.0.1:{tls_server.port}/0" in message
    assert "CERTIFICATE_VERIFY_FAILED" in message
    assert "give the CA that signed it as ssl_ca_certs" in message
    assert "?ssl_ca_certs=/path/to/ca.crt" in message


def test_a_missing_client_certificate_hints_at_ssl_certfile(mtls_server):
    url = with_query(mtls_server.url, ssl_ca_certs=str(mtls_server.certs.ca))
    message = unreachable_message({"REDIS_URL": url})
    assert f"Cannot connect to Redis at rediss://127.0.0.1:{mtls_server.port}/0" in message
    assert "give ssl_certfile and ssl_keyfile" in message


def test_a_plain_redis_client_of_a_tls_port_fails_cleanly(tls_server):
    settings = {"REDIS_URL": f"redis://127.0.0.1:{tls_server.port}/0"}
    message = unreachable_message(settings)
    assert f"Cannot connect to Redis at redis://127.0.0.1:{tls_server.port}/0" in message


def test_settings_round_trip_through_the_url_query(tls_server):
    url = with_query(tls_server.url, ssl_ca_certs="/ca.crt", ssl_certfile="/c", ssl_keyfile="/k")
    client = connection.get_redis_from_settings(Settings({"REDIS_URL": url}))
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["ssl_ca_certs"], kwargs["ssl_certfile"], kwargs["ssl_keyfile"]) == (
        "/ca.crt",
        "/c",
        "/k",
    )
    client.close()


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_two_workers_crawl_every_page_once_over_tls(mtls_server, tmp_path):
    """``scrapy crawl`` workers whose REDIS_URL alone says how to reach a server that
    requires client certificates."""
    from test_e2e import (
        DOMAIN,
        IDLE,
        PAGES,
        DemoSite,
        assert_hits,
        assert_items,
        crawl,
        expected_hits,
        expected_pages,
    )

    url = with_query(mtls_server.url, **mtls_server.client_options())
    with clean(mtls_server) as client, DemoSite(pages=PAGES) as site:
        client.lpush("myspider:start_urls", json.dumps({"url": site.url}))
        settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": IDLE, "SCHEDULER_PERSIST": True}
        crawl("myspider_redis", url, tmp_path, settings=settings, arguments=DOMAIN)
        assert_hits(site.snapshot(), expected_hits(PAGES))
        assert_items(client, "myspider_redis", site, expected_pages(PAGES))
