"""Requests that carry a request in their ``meta`` are shared through Redis.

A downloader middleware of the FlareSolverr pattern (tests/spiders/wrapping_middleware.py)
replaces every request by one that holds the original in its ``meta``. Such requests
used to be kept in the memory of the worker that made them (no safe serializer
encodes a Request): with one of two workers killed, its pages were never crawled.
Two ``mycrawler_redis`` workers of example-project crawl the demo site with it; one
is killed with SIGKILL mid-crawl and not restarted: the other crawls every page,
the dead worker's leases coming back when they expire.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from test_e2e import (
    DOMAIN,
    DemoSite,
    expected_hits,
    expected_pages,
    start_worker,
    wait_all,
    wait_for_requests,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

PAGES = 300
SPIDER = "mycrawler_redis"
SETTINGS = {
    "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
    "DOWNLOAD_DELAY": 0.02,  # long enough a crawl to be interrupted
    "SCHEDULER_WORKER_TIMEOUT": 3,  # the dead worker's leases expire soon
    "DOWNLOADER_MIDDLEWARES": json.dumps({"wrapping_middleware.WrapInMeta": 543}),
}
ENV = {
    "PYTHONPATH": os.pathsep.join(
        filter(None, [str(Path(__file__).parent / "spiders"), os.environ.get("PYTHONPATH")])
    )
}


def test_requests_wrapping_a_request_survive_a_killed_worker(server, redis_url, tmp_path):
    with DemoSite(pages=PAGES) as site:
        server.lpush("mycrawler:start_urls", site.url)
        workers = [
            start_worker(SPIDER, redis_url, tmp_path / f"w{n}.log", SETTINGS, DOMAIN, ENV)
            for n in (1, 2)
        ]
        wait_for_requests(site, PAGES // 3, workers[0], timeout=120)
        workers[0].process.kill()
        workers[0].process.wait()
        workers[0].log = workers[0].log_path.read_text(errors="replace")
        wait_all(workers[1:])
        hits = site.snapshot()
    missed = sorted(path for path in expected_hits(PAGES) if path not in hits)
    assert not missed, f"{len(missed)} paths never fetched, e.g. {missed[:10]}"
    items = {json.loads(raw)["url"] for raw in server.lrange(f"{SPIDER}:items", 0, -1)}
    base = site.url.rstrip("/")
    assert items == {base + path for path in expected_pages(PAGES) - {"/"}}
    survivor = workers[1].stats
    assert survivor.get("scheduler/unserializable", 0) == 0, survivor
    assert survivor.get("scheduler/leases/recovered", 0) >= 1, survivor
    assert "original_request" not in workers[1].log  # no warning quoting such a request
