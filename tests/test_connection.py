"""Clients built from settings; one client per crawler; a clear error when Redis is down."""

from __future__ import annotations

import pytest
import redis
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from helpers import DemoSpider
from redis_server import free_port
from scrapy_redis import connection, get_redis, get_redis_from_settings
from scrapy_redis.exceptions import RedisUnavailableError


class MyRedis(redis.Redis):
    pass


def test_from_settings_alias():
    assert connection.from_settings is connection.get_redis_from_settings


def test_defaults():
    params = connection.redis_params_from_settings(Settings())
    retry = params.pop("retry")
    assert params == {
        "socket_timeout": 10,
        "socket_connect_timeout": 5,
        # redis-py 5.0 retries only the errors listed (later versions these anyway)
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
        "encoding": "utf-8",
    }
    assert retry.get_retries() == 1  # fail fast on the reactor thread; we back off ourselves


def test_each_client_gets_its_own_mutable_defaults():
    """redis-py 5 appends TimeoutError to the retry_on_error list it is given when
    retry_on_timeout is set: the defaults' list must not be the one given."""
    first = connection.redis_params_from_settings(Settings())
    second = connection.redis_params_from_settings(Settings())
    first["retry_on_error"].append(TimeoutError)
    assert second["retry_on_error"] == [redis.ConnectionError, redis.TimeoutError]
    assert first["retry"] is not second["retry"]


def test_shortcuts_override_params_and_zero_is_honoured():
    params = connection.redis_params_from_settings(
        Settings(
            {
                "REDIS_PARAMS": {"db": 3, "decode_responses": True, "socket_timeout": 5},
                "REDIS_DB": 0,
                "REDIS_DECODE_RESPONSES": False,
                "REDIS_HOST": "h",
                "REDIS_PORT": "6390",
            }
        )
    )
    assert params["db"] == 0
    assert params["decode_responses"] is False
    assert params["port"] == 6390
    assert params["host"] == "h"
    assert params["socket_timeout"] == 5


def test_redis_cls_dotted_path():
    client = get_redis_from_settings(
        Settings({"REDIS_PARAMS": {"redis_cls": "test_connection.MyRedis"}})
    )
    assert isinstance(client, MyRedis)


def test_redis_url_wins_over_host_and_port(redis_server):
    client = get_redis_from_settings(
        Settings({"REDIS_URL": redis_server.url, "REDIS_HOST": "203.0.113.1", "REDIS_PORT": 1})
    )
    assert client.ping()
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"]) == ("127.0.0.1", redis_server.port)


def test_rediss_url_uses_tls():
    client = get_redis(url="rediss://:secret@127.0.0.1:6390/2")
    assert client.connection_pool.connection_class is redis.SSLConnection
    assert connection.describe_server(client) == "rediss://:***@127.0.0.1:6390/2"


def test_one_client_per_crawler(redis_server):
    crawler = get_crawler(DemoSpider, {"REDIS_URL": redis_server.url})
    assert connection.get_redis_from_crawler(crawler) is connection.get_redis_from_crawler(crawler)
    other = get_crawler(DemoSpider, {"REDIS_URL": redis_server.url})
    assert connection.get_redis_from_crawler(other) is not connection.get_redis_from_crawler(
        crawler
    )


def test_unreachable_redis_gives_one_clear_error():
    url = f"redis://user:hunter2@127.0.0.1:{free_port()}/0"
    crawler = get_crawler(
        DemoSpider, {"REDIS_URL": url, "REDIS_PARAMS": {"socket_connect_timeout": 1}}
    )
    with pytest.raises(RedisUnavailableError) as info:
        connection.get_redis_from_crawler(crawler)
    message = str(info.value)
    assert "hunter2" not in message
    assert f"redis://user:***@127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}/0" in message
    assert "REDIS_URL" in message
    assert info.value.__cause__ is None
