"""Real third-party packages that subclass scrapy-redis, crawling with real workers.

Packages from the package index written for the original scrapy-redis subclass
its classes with an ``__init__`` (and ``open()``) of their own that never call
ours. They are installed with ``pip --no-deps`` into a directory of their own
(their requirement on the original scrapy-redis must never replace this
package), put on the workers' PYTHONPATH, and two ``scrapy crawl`` workers of
example-project's ``mycrawler_redis`` crawl the local demo site with their
classes: every page must be fetched once.

* scrapy-redis-bloomfilter 0.8.1: ``RFPDupeFilter`` subclass with its own
  ``__init__(server, key, debug, bit, hash_number)`` and ``request_seen()`` (a
  Bloom filter in a Redis bitmap), ``Scheduler`` subclass with its own ``open()``.
* scrapy-redis-bf 0.1.2: ``Scheduler`` subclass with the original's ``__init__``,
  ``from_settings()``, ``from_crawler()`` and ``open()``, none of ours called. Its
  own dupefilter needs the RedisBloom module (``BF.ADD``), which the test server
  lacks: its scheduler runs with ours, and with scrapy-redis-bloomfilter's.

scrapy-redis-bloomfilter's ``request_seen()`` checks the bits (6 GETBIT) and then
sets them (6 SETBIT) in separate round trips: two workers meeting the same new
link at once both find it new, and that page is fetched twice. That race is in
its code (the original scrapy-redis under it has it too), so with its filter a
few pages may be fetched twice; none may be missed. With our filter (one atomic
SADD) every page is fetched exactly once.

If pip cannot install them the test fails in CI (CI is set) and is skipped
elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import test_e2e
from redis_server import in_ci
from test_e2e import DOMAIN, DemoSite, expected_hits, expected_pages, keys, start_worker, wait_all

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

PACKAGES = ["scrapy-redis-bloomfilter==0.8.1", "scrapy-redis-bf==0.1.2", "six"]
PAGES = 500
SPIDER = "mycrawler_redis"
SETTINGS = {
    "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
    # These schedulers replace our open(): no worker registry tells the last worker
    # from the others, so a worker that closes without persist deletes the shared
    # queue and fingerprints under the other, as the original did.
    "SCHEDULER_PERSIST": True,
    "BLOOMFILTER_BIT": 22,  # 512 KiB bitmap instead of 128 MiB
}


@pytest.fixture(scope="module")
def third_party(tmp_path_factory):
    """The packages, installed without their dependencies into a directory of their own."""
    target = tmp_path_factory.mktemp("third-party")
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
    result = subprocess.run(
        [*command, *PACKAGES], capture_output=True, text=True, timeout=240, check=False
    )
    if result.returncode != 0:
        message = f"pip could not install {PACKAGES}: {result.stderr[-2000:]}"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    assert not (target / "scrapy_redis").exists(), "the original scrapy-redis was installed"
    return target


@pytest.fixture
def site():
    with DemoSite(pages=PAGES) as demo_site:
        yield demo_site


@pytest.fixture
def tolerant(monkeypatch):
    """Their code calls Spider.log() (deprecated by Scrapy) when a crawl resumes: the
    workers' logs may show that warning, never an error or a traceback."""
    monkeypatch.setattr(test_e2e, "PROBLEM", re.compile(r"Traceback|\] (ERROR|CRITICAL):"))


def _crawl(site, redis_url, tmp_path, third_party, settings):
    env = {
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(third_party), os.environ.get("PYTHONPATH")])
        )
    }
    workers = [
        start_worker(
            SPIDER, redis_url, tmp_path / f"w{n}.log", {**SETTINGS, **settings}, DOMAIN, env
        )
        for n in (1, 2)
    ]
    wait_all(workers)
    return workers


def _assert_crawled_once(server, site, racy_duplicates=0):
    """Every page fetched once (up to ``racy_duplicates`` pages twice), every item once."""
    hits = site.snapshot()
    expected = expected_hits(PAGES)
    missed = sorted(set(expected) - set(hits))
    assert not missed, f"{len(missed)} pages never fetched, e.g. {missed[:10]}"
    unknown = set(hits) - set(expected)
    assert not unknown, f"unexpected paths fetched: {sorted(unknown)[:10]}"
    twice = {path: n for path, n in hits.items() if n == expected[path] + 1}
    wrong = {path: n for path, n in hits.items() if n != expected[path] and path not in twice}
    assert not wrong, f"(path, fetches) not as expected: {sorted(wrong.items())[:10]}"
    assert len(twice) <= racy_duplicates, f"fetched twice: {sorted(twice)[:10]}"
    urls = [json.loads(raw)["url"] for raw in server.lrange(f"{SPIDER}:items", 0, -1)]
    assert len(urls) - len(set(urls)) <= len(twice)
    base = site.url.rstrip("/")
    assert set(urls) == {base + path for path in expected_pages(PAGES) - {"/"}}


def test_scrapy_redis_bloomfilter(site, server, redis_url, tmp_path, third_party, tolerant):
    server.lpush("mycrawler:start_urls", site.url)
    settings = {
        "SCHEDULER": "scrapy_redis_bloomfilter.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis_bloomfilter.dupefilter.RFPDupeFilter",
    }
    _crawl(site, redis_url, tmp_path, third_party, settings)
    _assert_crawled_once(server, site, racy_duplicates=PAGES // 100)
    assert keys(server) >= {f"{SPIDER}:bloomfilter"}  # its filter, not ours
    assert f"{SPIDER}:dupefilter" not in keys(server)


@pytest.mark.parametrize(
    "dupefilter",
    ["scrapy_redis.dupefilter.RFPDupeFilter", "scrapy_redis_bloomfilter.dupefilter.RFPDupeFilter"],
)
def test_scrapy_redis_bf_scheduler(
    site, server, redis_url, tmp_path, third_party, tolerant, dupefilter
):
    server.lpush("mycrawler:start_urls", site.url)
    settings = {"SCHEDULER": "scrapy_redis_bf.scheduler.Scheduler", "DUPEFILTER_CLASS": dupefilter}
    _crawl(site, redis_url, tmp_path, third_party, settings)
    ours = dupefilter.startswith("scrapy_redis.")
    _assert_crawled_once(server, site, racy_duplicates=0 if ours else PAGES // 100)
