"""Redis rolled back under a running crawl: no page may be lost.

An RDB restore, a failover to a replica that was behind or a crash with
``appendfsync everysec`` gives the workers a server whose data is older than
what they read from it: fingerprints and pushed requests are gone, and requests
popped since come back (from the restored queue and leases) to be crawled again.
Each worker's seen cache must not keep dropping the links it met before: here
two ``mycrawler_redis`` workers crawl the demo site while redis-server is
restarted from a dump taken earlier in the crawl, and every page must still be
fetched and scraped.
"""

from __future__ import annotations

import json
import shutil

import pytest
import redis

from redis_server import RedisServer
from test_e2e import (  # test_e2e puts example-project (demo_site) on sys.path
    DOMAIN,
    DemoSite,
    expected_hits,
    expected_pages,
    start_worker,
    wait_all,
    wait_for_requests,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

PAGES = 1200
SPIDER = "mycrawler_redis"
SETTINGS = {
    "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
    "SCHEDULER_PERSIST": False,
    "DOWNLOAD_DELAY": 0.01,  # long enough a crawl to take a dump and roll back to it
    "SCHEDULER_WORKER_TIMEOUT": 3,
}


@pytest.fixture
def site():
    with DemoSite(pages=PAGES) as demo_site:
        yield demo_site


def test_rolled_back_to_an_older_dump_mid_crawl(site, tmp_path):
    server = RedisServer().start()
    try:
        client = redis.Redis.from_url(server.url)
        client.lpush("mycrawler:start_urls", site.url)
        workers = [
            start_worker(SPIDER, server.url, tmp_path / f"w{n}.log", SETTINGS, DOMAIN)
            for n in (1, 2)
        ]
        wait_for_requests(site, 200, workers[0], timeout=120)
        client.save()
        dump = server.dir / "dump.rdb"
        older = shutil.copy(dump, tmp_path / "older.rdb")
        wait_for_requests(site, 700, workers[0], timeout=120)
        server.stop()  # no save points: the newer data is not written
        shutil.copy(older, dump)
        server.start()  # the same port, the older data
        wait_all(workers)

        hits, expected = site.snapshot(), expected_hits(PAGES)
        missed = sorted(path for path in expected if path not in hits)
        assert not missed, f"{len(missed)} pages never crawled after the rollback: {missed[:10]}"
        items = {json.loads(raw)["url"] for raw in client.lrange(f"{SPIDER}:items", 0, -1)}
        base = site.url.rstrip("/")
        assert items == {base + path for path in expected_pages(PAGES) - {"/"}}
    finally:
        server.cleanup()
