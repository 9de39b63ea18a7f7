"""Every key a worker writes for itself is deleted when it closes normally.

Two real ``scrapy crawl`` workers of example-project (RedisPipeline on) crawl a small
site with SCHEDULER_PERSIST on and RedisStatsCollector, under several configurations;
once both have closed on their own, every key left in Redis must be one that
docs/keys.rst documents as kept after a crawl: the queue (empty: gone), the
fingerprints, the items and the stats. Nothing of a worker's own (write records,
leases, registry entries) may stay behind.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from test_e2e import DOMAIN, DemoSite, crawl

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SPIDER = "myspider_redis"
#: The keys docs/keys.rst says a crawl keeps (SCHEDULER_PERSIST on, a stats collector).
KEPT = re.compile(
    rf"{SPIDER}:("
    r"requests|requests:prio:-?\d+"  # the queue (gone once empty)
    r"|dupefilter|dupefilter:lean|dupefilter:lean:[0-9a-f]+"  # set / lean filter
    r"|dupefilter:bloom|dupefilter:bloom:[^:]+:\d+:\d+"  # Bloom filter (meta hash above)
    r"|items|stats|stats:workers|stats:worker:.+"
    r")"
)
CONFIGURATIONS = {
    "default": {},
    # its own push: the filter's request_seen() records the fingerprints
    "own queue class, lean filter": {
        "SCHEDULER_QUEUE_CLASS": "own_queue.OwnPushPopQueue",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.LeanDupeFilter",
    },
    "Bloom filter": {"DUPEFILTER_CLASS": "scrapy_redis.dupefilter.BloomDupeFilter"},
}


@pytest.mark.parametrize("configuration", CONFIGURATIONS)
def test_a_normal_close_leaves_only_the_documented_keys(server, redis_url, tmp_path, configuration):
    settings = {
        "MAX_IDLE_TIME_BEFORE_CLOSE": 1,
        "SCHEDULER_PERSIST": True,
        "STATS_CLASS": "scrapy_redis.stats.RedisStatsCollector",
        **CONFIGURATIONS[configuration],
    }
    spiders = str(Path(__file__).parent / "spiders")  # own_queue
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [spiders, os.environ.get("PYTHONPATH")]))}
    with DemoSite(pages=40) as site:
        server.lpush("myspider:start_urls", json.dumps({"url": site.url}))
        crawl(SPIDER, redis_url, tmp_path, settings=settings, arguments=DOMAIN, env=env)
    left = sorted(key.decode() for key in server.keys("*"))
    assert server.llen(f"{SPIDER}:items") > 40, left
    assert any(key.startswith(f"{SPIDER}:dupefilter") for key in left), left
    assert [key for key in left if not KEPT.fullmatch(key)] == [], left
