"""Writes that redis-py sends again after losing their reply are applied once.

The default REDIS_PARAMS retry a command once when its reply does not come (the
connection drops, or the server stalls longer than ``socket_timeout``). The
server ran the first copy: a write that is not idempotent would be applied
twice. A proxy in front of the test server loses one reply for real.
"""

from __future__ import annotations

import json
import time

import pytest
from scrapy.utils.test import get_crawler

from helpers import DemoSpider
from lossy_proxy import LossyProxy
from redis_server import RedisServer
from scrapy_redis.pipelines import RedisPipeline

LOSSES = ["drop", "stall"]


@pytest.fixture
def proxy(redis_server):
    proxy = LossyProxy(redis_server.port)
    yield proxy
    proxy.close()


def crawler_settings(proxy: LossyProxy, **extra):
    # A short socket_timeout: a "stall" loss costs the test half a second.
    return {"REDIS_URL": proxy.url, "REDIS_PARAMS": {"socket_timeout": 0.5}, **extra}


def pipeline(settings) -> RedisPipeline:
    crawler = get_crawler(DemoSpider, settings)
    crawler.spider = crawler._create_spider()
    return RedisPipeline.from_crawler(crawler)


def stored_items(server, key="demo:items") -> list[int]:
    return [json.loads(raw)["n"] for raw in server.lrange(key, 0, -1)]


@pytest.mark.parametrize("how", LOSSES)
def test_an_item_whose_reply_is_lost_is_stored_once(proxy, server, how):
    pipe = pipeline(crawler_settings(proxy))
    pipe.process_item({"n": 1})
    proxy.lose_next_reply(how)
    pipe.process_item({"n": 2})
    assert proxy.lost  # the reply was lost, the command sent again
    assert stored_items(server) == [1, 2]


@pytest.fixture
def own_server():
    """A redis-server of this test only, so that it can be stopped and started."""
    server = RedisServer().start()
    yield server
    server.cleanup()


def test_items_kept_during_an_outage_are_pushed_once_when_the_pipeline_sees_redis_back(
    own_server,
):
    """The pipeline is the first component to reach Redis again: its own recovery
    callback must not push the items it is pushing a second time."""
    pipe = pipeline({"REDIS_URL": own_server.url})
    own_server.stop()
    for n in range(3):
        pipe.process_item({"n": n})  # kept in memory
    assert pipe.guard.down
    own_server.start()
    time.sleep(pipe.guard.FIRST_BACKOFF + 0.1)  # the guard tries Redis again
    pipe.process_item({"n": 3})
    assert not pipe.guard.down
    assert stored_items(pipe.server) == [0, 1, 2, 3]
