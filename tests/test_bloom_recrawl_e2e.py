"""End-to-end (issue 27.1) with the Bloom filter: two real workers recrawl a site whose
pages change, with BloomDupeFilter and a 3-second DUPEFILTER_LIFETIME (time generations
of 1.5 s). Pushed again before the first generation expires, the start URL leads to no
page fetched again; pushed once every generation has expired, every page is fetched once
more (exactly twice in all, across both workers) and the items show the new content."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from test_e2e import DOMAIN, start_worker, wait_all
from test_recrawl_e2e import (
    LIFETIME,
    PAGES,
    SPIDER,
    START_KEY,
    ChangingSite,
    round_done,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

FILTER = f"{SPIDER}:dupefilter"


def generations(server) -> list[bytes]:
    return list(server.scan_iter(match=f"{FILTER}:bloom:t*", count=1000))


def first_expiry_ms(server) -> float:
    """When the first live generation expires, by the server's clock."""
    seconds, micros = server.time()
    now = seconds * 1000 + micros / 1000
    return now + min(server.pttl(key) for key in generations(server))


def test_bloom_pages_are_crawled_again_after_their_lifetime_only(server, redis_url, tmp_path):
    site = ChangingSite()
    settings = {
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.BloomDupeFilter",
        "BLOOMFILTER_CAPACITY": 10_000,
        "DUPEFILTER_LIFETIME": LIFETIME,
        "MAX_IDLE_TIME_BEFORE_CLOSE": 8,
    }
    workers = [
        start_worker(SPIDER, redis_url, tmp_path / f"w{n}.log", settings, arguments=DOMAIN)
        for n in (1, 2)
    ]
    try:
        server.lpush(START_KEY, f"{site.url}/?round=1")
        wait_until(lambda: round_done(server, site, 1), "crawling round 1", workers)
        assert set(site.pages().values()) == {1} and len(site.pages()) == PAGES
        first_expiry = first_expiry_ms(server)
        assert server.type(FILTER) == b"hash"

        # Before the lifetime: the start page is fetched (dont_filter), no page again.
        server.lpush(START_KEY, f"{site.url}/?round=2")
        wait_until(lambda: round_done(server, site, 2), "crawling round 2", workers)
        seconds, micros = server.time()
        assert seconds * 1000 + micros / 1000 < first_expiry, "round 2 too slow to test it"
        assert set(site.pages().values()) == {1}, site.pages()

        # After the lifetime: Redis dropped every generation whole.
        site.version = 2
        wait_until(lambda: not generations(server), "expiring", workers)
        server.lpush(START_KEY, f"{site.url}/?round=3")
        wait_until(lambda: round_done(server, site, 3), "crawling round 3", workers)
    finally:
        wait_all(workers)
        site.close()

    assert site.pages() == {f"/p/{i}.html": 2 for i in range(PAGES)}
    items = [json.loads(raw) for raw in server.lrange(f"{SPIDER}:items", 0, -1)]
    names = Counter(item["name"].split()[-1] for item in items if "/p/" in item["url"])
    assert names == {"v1": PAGES, "v2": PAGES}
    fetched = [w.stats.get("response_received_count", 0) for w in workers]
    assert sum(fetched) == 3 + 2 * PAGES + 3  # 3 start pages, each page twice, 3 ends
