"""A crawl under a Scrapy whose engine has no ``slot.inprogress`` (a future Scrapy).

The scheduler reads that private set to release the leases of finished requests.
Without it, it warns once and falls back to the weak references it keeps: a
handed-out request is done once Scrapy has freed it. The crawl runs with the seam
``scrapy_redis.core.engine.IN_PROGRESS_ATTRIBUTE`` set to a name Scrapy lacks (by the
spider file, tests/spiders/future_engine_spider.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from test_e2e import DemoSite, assert_hits, expected_hits, keys, parse_stats

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

PAGES = 200
WARNING = "has no slot.inprogress_of_a_future_scrapy"


def test_leases_are_released_during_the_crawl_without_inprogress(server, redis_url, tmp_path):
    spider_file = Path(__file__).parent / "spiders" / "future_engine_spider.py"
    log_path = tmp_path / "future.log"
    with DemoSite(pages=PAGES) as site:
        server.lpush("future_engine:start_urls", site.url)
        command = [sys.executable, "-m", "scrapy", "runspider", str(spider_file)]
        command += ["-s", f"REDIS_URL={redis_url}", "-s", "LOG_LEVEL=INFO"]
        with log_path.open("wb") as log:
            process = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=100)
        hits = site.snapshot()
    text = log_path.read_text()
    assert process.returncode == 0, text[-3000:]
    assert text.count(WARNING) == 1, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    stats = parse_stats(text)
    assert stats["finish_reason"] == "finished"
    assert stats.get("future/acked_during_crawl", 0) > 0, stats  # not only at close
    # The rest at close (after a garbage collection): none was left leased.
    assert stats["scheduler/leases/acked"] == stats["scheduler/leases/leased"], stats
    assert "scheduler/leases/returned" not in stats, stats
    assert_hits(hits, expected_hits(PAGES))  # every page once
    assert keys(server) == set()  # SCHEDULER_PERSIST = False: the last worker cleared all
