"""End-to-end (issue 27.1) with the Bloom filter: two real workers recrawl a site whose
pages change, with BloomDupeFilter and a 3-second DUPEFILTER_LIFETIME (time generations
of 1.5 s). Pushed again before the first generation expires, the start URL leads to no
page fetched again; pushed once every generation has expired, every page is fetched once
more (exactly twice in all, across both workers) and the items show the new content."""

from __future__ import annotations

import pytest

from test_recrawl_e2e import (
    LIFETIME,
    SPIDER,
    ChangingSite,
    assert_every_page_crawled_twice,
    crawl_three_rounds,
    two_workers,
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
    workers = two_workers(redis_url, tmp_path, settings)
    crawl_three_rounds(
        server,
        site,
        workers,
        first_expiry=lambda: first_expiry_ms(server),
        expired=lambda: not generations(server),  # Redis dropped every generation whole
    )
    assert server.type(FILTER) == b"hash"
    assert_every_page_crawled_twice(server, site, workers)
