"""End-to-end: what a user sees from ``scrapy crawl`` when re-pushing start URLs, and when
Redis cannot be reached (real processes of example-project, see test_e2e.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "example-project"))

from demo_site import DemoSite

from redis_server import free_port
from test_e2e import DOMAIN, start_worker, wait_all

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

#: MAX_IDLE_TIME_BEFORE_CLOSE of the workers: they stop soon after the crawl is done.
IDLE = 1


def test_a_start_url_pushed_again_is_crawled_again(server, redis_url, tmp_path):
    """As in the original, start requests bypass the duplicate filter: a URL pushed
    again after a persisted crawl is fetched again (the pages it links to, already
    seen, are not). With REDIS_START_URLS_DONT_FILTER = False it is filtered, and an
    INFO line says so."""
    settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": IDLE, "SCHEDULER_PERSIST": True}
    filtering = {**settings, "REDIS_START_URLS_DONT_FILTER": False}
    with DemoSite(pages=30) as site:
        logs = []
        for run, run_settings in enumerate((filtering, settings, filtering)):
            server.lpush("myspider:start_urls", site.url)
            log = tmp_path / f"run{run}.log"
            worker = start_worker("myspider_redis", redis_url, log, run_settings, DOMAIN)
            wait_all([worker])
            logs.append(worker.log)
            if run == 0:
                first_crawl = site.snapshot()
        hits = site.snapshot()
    assert first_crawl["/"] == 1 and first_crawl["/p/0.html"] == 1
    # the second run fetched the start URL again, and nothing else
    assert hits["/"] == 2
    assert {path: count for path, count in hits.items() if path != "/"} == {
        path: count for path, count in first_crawl.items() if path != "/"
    }
    # the third filtered it, and said so
    filtered = "Start requests filtered as duplicates of requests seen before: 1 "
    assert [filtered in log for log in logs] == [False, False, True]
    assert "INFO: " + filtered in logs[2]


@pytest.mark.parametrize("spider", ["myspider_redis", "dmoz"])
def test_an_unreachable_redis_fails_the_crawl_with_one_clear_line(tmp_path, spider):
    """A Redis spider (its start URLs come from Redis) and a plain spider using the Redis
    scheduler and pipeline: the crawl fails (exit code 1) with the one line that names
    the server and the settings, not a 25-line 'Task exception was never retrieved'."""
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    worker = start_worker(spider, url, tmp_path / f"{spider}.log")
    worker.process.wait(60)
    log = worker.log_path.read_text(encoding="utf-8", errors="replace")
    assert worker.process.returncode == 1, log
    assert "Traceback" not in log and "never retrieved" not in log, log
    [error] = [line for line in log.splitlines() if "ERROR" in line or "CRITICAL" in line]
    assert error.endswith(
        f"ERROR: Cannot connect to Redis at {url}: Error 111 connecting to "
        f"127.0.0.1:{url.split(':')[2].split('/')[0]}. Connection refused. Check REDIS_URL "
        "(or REDIS_HOST / REDIS_PORT / REDIS_PARAMS) and that the server is running."
    ), log
