"""Users' tests with a stand-in for the Redis client (see scrapy_redis/store/stand_ins.py).

fakeredis appears here only as the user's stand-in under test, never as a
substitute for Redis in our own tests: users test their spiders with it (with and
without its Lua support) or with a fake of their own implementing only the
commands the original scrapy-redis used. Where such a client cannot run our
scripts they get one line naming the fix; the duplicate filter and the item
pipeline fall back to the original's plain commands; the connectivity check never
fails on a client without ping().
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from scrapy import Request
from scrapy.utils.test import get_crawler

from helpers import DemoSpider
from scrapy_redis import connection
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.exceptions import ScriptsUnavailableError
from scrapy_redis.pipelines import RedisPipeline
from scrapy_redis.spiders import RedisSpider


class OriginalCommandsFake:
    """A user's fake: the commands the original scrapy-redis used, nothing else."""

    def __init__(self) -> None:
        self.data: dict[str, object] = {}

    def sadd(self, key, *members):
        members_of = self.data.setdefault(key, set())
        added = len(set(members) - members_of)
        members_of.update(members)
        return added

    def rpush(self, key, *values):
        self.data.setdefault(key, []).extend(values)
        return len(self.data[key])

    def lpush(self, key, *values):
        self.data.setdefault(key, [])[:0] = reversed(values)
        return len(self.data[key])

    def delete(self, *keys):
        return sum(self.data.pop(key, None) is not None for key in keys)


class StartSpider(RedisSpider):
    name = "start"

    def parse(self, response):  # pragma: no cover
        return None


def test_a_fake_with_the_original_commands(monkeypatch):
    fake = OriginalCommandsFake()
    connection.ensure_reachable(fake)  # no ping(): nothing to reach, no AttributeError
    dupefilter = RFPDupeFilter(fake, "demo:dupefilter")
    assert dupefilter.request_seen(Request("http://example.com")) is False
    assert dupefilter.request_seen(Request("http://example.com")) is True
    dupefilter.close("finished")  # the original's DEL
    assert "demo:dupefilter" not in fake.data
    crawler = get_crawler(DemoSpider, {"REDIS_ITEMS_SERIALIZER": "json.dumps"})
    monkeypatch.setattr(connection, "from_settings", lambda settings: fake)
    pipeline = RedisPipeline.from_crawler(crawler)
    pipeline.process_item({"n": 1}, DemoSpider())
    assert fake.data["demo:items"] == ['{"n": 1}']
    spider = StartSpider.from_crawler(get_crawler(StartSpider))
    fake.lpush("start:start_urls", "http://example.com")
    with pytest.raises(ScriptsUnavailableError) as raised:
        spider.next_requests()
    message = str(raised.value)
    assert "\n" not in message
    assert "OriginalCommandsFake cannot run scrapy-redis's Lua script" in message
    assert "pop_start_messages.lua (it has no execute_command())" in message
    assert "test against a real redis-server (REDIS_URL)" in message


# A user's test of their spider, run in a process of its own: with fakeredis's Lua support
# (lupa imported) or without it (lupa made unimportable, as when it is not installed).
USERS_TEST = """
import json, sys
if sys.argv[1] == "without-lua":
    sys.modules["lupa"] = None
from unittest import mock
import fakeredis
from scrapy import Request, Spider
from scrapy.utils.reactor import install_reactor
from scrapy.utils.test import get_crawler
install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
from scrapy_redis import connection
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.pipelines import RedisPipeline
from scrapy_redis.scheduler import Scheduler

class Demo(Spider):
    name = "demo"

fake = fakeredis.FakeRedis()
out = {"lua": "lupa" in sys.modules and sys.modules["lupa"] is not None}
connection.ensure_reachable(fake)
df = RFPDupeFilter(fake, "demo:dupefilter")
out["seen"] = [df.request_seen(Request("http://example.com")) for _ in range(2)]
with mock.patch("scrapy_redis.connection.from_settings", return_value=fake):
    crawler = get_crawler(Demo, {"REDIS_ITEMS_SERIALIZER": "json.dumps"})
    RedisPipeline.from_crawler(crawler).process_item({"n": 1}, Demo())
    out["items"] = [item.decode() for item in fake.lrange("demo:items", 0, -1)]
    crawler.spider = spider = Demo.from_crawler(crawler)
    try:
        Scheduler.from_crawler(crawler).open(spider)
    except Exception as exc:
        out["scheduler"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


@pytest.mark.parametrize(
    "mode, reason",
    [("with-lua", "its Lua lacks Redis's bit library"), ("without-lua", "it has no EVAL command")],
)
def test_fakeredis_as_a_users_stand_in(tmp_path, mode, reason):
    script = tmp_path / "users_test.py"
    script.write_text(USERS_TEST)
    result = subprocess.run(
        [sys.executable, str(script), mode], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["lua"] is (mode == "with-lua")
    assert out["seen"] == [False, True]
    assert out["items"] == ['{"n": 1}']
    scheduler_error = out["scheduler"]
    assert scheduler_error.startswith("ScriptsUnavailableError: The Redis client fakeredis.")
    assert f"({reason}): test against a real redis-server (REDIS_URL)" in scheduler_error
    assert "\n" not in scheduler_error
