"""End-to-end: real ``scrapy crawl`` processes of example-project crawl a local site together.

Each test serves the demo site (example-project/demo_site.py) in this process,
runs two workers of one example spider at once against the session's
redis-server (and, for ``dmoz``, an interrupted worker before them) and
checks, from the site's hit counter and from Redis, that the site was crawled
exactly once in all: every page fetched once, every item stored once, and the
Redis keys left as SCHEDULER_PERSIST says. Workers must stop on their own and
log no error, traceback or deprecation warning.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from scrapy import Request

from scrapy_redis.dupefilter import request_fingerprint

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "example-project"
sys.path.insert(0, str(EXAMPLE))

from demo import parse_stats  # noqa: E402
from demo_site import DemoSite, expected_hits, expected_pages, page_links, page_path  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

PAGES = 1000
#: Seconds a crawl (all its workers) may take before the workers are killed.
CRAWL_TIMEOUT = 180
#: MAX_IDLE_TIME_BEFORE_CLOSE of the Redis spiders' workers.
IDLE = 2
#: Spider arguments of the Redis spiders: stay on the demo site.
DOMAIN = {"domain": "127.0.0.1"}
#: Every worker process started by the running test: conftest.py kills those still
#: running when it ends (a test that failed half-way), so none outlives its test.
STARTED: list[subprocess.Popen[bytes]] = []
PROBLEM = re.compile(r"Traceback|\] (ERROR|CRITICAL):|DeprecationWarning")


@pytest.fixture
def site():
    with DemoSite(pages=PAGES) as demo_site:
        yield demo_site


@dataclass
class Worker:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log: str = ""

    @property
    def stats(self) -> dict:
        return parse_stats(self.log)

    def describe(self) -> str:
        problems = [line for line in self.log.splitlines() if PROBLEM.search(line)]
        tail = "\n".join(self.log.splitlines()[-40:])
        return (
            f"--- {self.name}: exit code {self.process.returncode}, log {self.log_path}\n"
            f"problem lines: {problems[:10]}\nlast lines:\n{tail}"
        )


def start_worker(spider, redis_url, log_path, settings=None, arguments=None, env=None) -> Worker:
    """``scrapy crawl spider -a name=value... -s NAME=value...`` in example-project."""
    settings = {"LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": False, **(settings or {})}
    command = [sys.executable, "-m", "scrapy", "crawl", spider]
    command += [
        arg for name, value in (arguments or {}).items() for arg in ("-a", f"{name}={value}")
    ]
    command += [arg for name, value in settings.items() for arg in ("-s", f"{name}={value}")]
    environ = {**os.environ, "REDIS_URL": redis_url, "PYTHONWARNINGS": "default", **(env or {})}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=EXAMPLE, env=environ, stdout=log, stderr=subprocess.STDOUT
        )
    STARTED.append(process)
    return Worker(log_path.stem, process, log_path)


def wait_all(
    workers: list[Worker], timeout: float = CRAWL_TIMEOUT, finish_reason: str = "finished"
) -> None:
    """Wait for the workers to stop on their own; kill them and fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        for worker in workers:
            worker.process.wait(max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait()
            worker.log = worker.log_path.read_text(encoding="utf-8", errors="replace")
    report = "\n".join(worker.describe() for worker in workers)
    assert not timed_out, f"workers still running after {timeout}s\n{report}"
    for worker in workers:
        assert worker.process.returncode == 0, report
        assert not PROBLEM.search(worker.log), report
        assert worker.stats.get("finish_reason") == finish_reason, report


def wait_for_requests(site, count: int, worker: Worker, timeout: float = CRAWL_TIMEOUT) -> None:
    """Wait until the site has served ``count`` requests (while ``worker`` runs); fail
    after ``timeout`` s (a bound for a machine stalled by other work, not a wait)."""
    deadline = time.monotonic() + timeout
    while sum(site.snapshot().values()) < count:
        assert worker.process.poll() is None, f"{worker.name} exited early"
        assert time.monotonic() < deadline, f"fewer than {count} requests in {timeout}s"
        time.sleep(0.02)


def crawl(spider, redis_url, tmp_path, workers=2, tag="", **options) -> list[Worker]:
    """Run ``workers`` processes of ``spider`` at once until they stop; checks their logs."""
    running = [
        start_worker(spider, redis_url, tmp_path / f"{spider}{tag}-{n}.log", **options)
        for n in range(1, workers + 1)
    ]
    wait_all(running)
    return running


# -- assertions ---------------------------------------------------------------------------


def assert_hits(hits: dict[str, int], expected: dict[str, int]) -> None:
    """The site served exactly ``expected``: every page once, nothing else."""
    pages = {path: count for path, count in hits.items() if path.startswith("/p/")}
    twice = {path: count for path, count in pages.items() if count != 1}
    assert not twice, f"pages fetched more than once: {sorted(twice.items())[:20]}"
    missed = sorted(set(expected) - set(hits))
    assert not missed, f"{len(missed)} paths never fetched, e.g. {missed[:20]}"
    wrong = {
        path: (count, expected.get(path))
        for path, count in hits.items()
        if count != expected.get(path)
    }
    assert not wrong, f"(hits, expected) differ: {sorted(wrong.items())[:20]}"


def reachable_hits(pages: int, skipped: set[str]) -> dict[str, int]:
    """expected_hits() of the demo site for a crawl whose filter took the paths
    ``skipped`` for duplicates (a Bloom filter's false positives): neither they nor what
    only they lead to are fetched."""

    def links(path: str) -> list[str]:
        kind, _, rest = path.lstrip("/").partition("/")
        number = rest.removesuffix(".html")
        if path == "/":
            return page_links(-1, pages).paths()
        if kind == "p":
            return page_links(int(number), pages).paths()
        if kind in ("r", "error"):  # a redirect; a recovered page's one link
            return [page_path(int(number))]
        return []  # missing: a 404

    reached, todo = {"/"}, ["/"]
    while todo:
        for link in links(todo.pop()):
            if link not in reached and link not in skipped:
                reached.add(link)
                todo.append(link)
    expected = expected_hits(pages)
    return {path: expected[path] for path in reached}


def assert_items(server, spider, site, expected_paths) -> list[dict]:
    """``<spider>:items`` holds one item per expected page, none twice."""
    items = [json.loads(raw) for raw in server.lrange(f"{spider}:items", 0, -1)]
    urls = [item["url"] for item in items]
    assert len(urls) == len(set(urls)), "some pages were scraped into more than one item"
    base = site.url.rstrip("/")
    assert set(urls) == {base + path for path in expected_paths}
    for item in items:
        assert item["spider"] == spider
        assert item["name"]
        assert datetime.fromisoformat(item["crawled"])  # ScrapyJSONEncoder's format
    return items


def fingerprints(site, paths) -> set[str]:
    base = site.url.rstrip("/")
    return {request_fingerprint(Request(base + path)) for path in paths}


def keys(server) -> set[str]:
    return {key.decode() for key in server.keys("*")}


def assert_each_worker_crawled(workers: list[Worker]) -> None:
    counts = {worker.name: worker.stats.get("response_received_count", 0) for worker in workers}
    assert all(counts.values()), f"a worker fetched nothing: {counts}"


# -- the example spiders ------------------------------------------------------------------


def test_mycrawler_redis_two_workers_without_persist(site, server, redis_url, tmp_path):
    """RedisCrawlSpider, SCHEDULER_PERSIST=False: the last worker deletes the shared keys."""
    server.lpush("mycrawler:start_urls", site.url)
    settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": IDLE, "SCHEDULER_PERSIST": False}
    workers = crawl("mycrawler_redis", redis_url, tmp_path, settings=settings, arguments=DOMAIN)

    assert_hits(site.snapshot(), expected_hits(PAGES))
    # A CrawlSpider makes no item of its start page.
    assert_items(server, "mycrawler_redis", site, expected_pages(PAGES) - {"/"})
    # Queue (index and per-priority lists), dupefilter and workers registry are gone;
    # the start URL was consumed. Only the items remain.
    assert keys(server) == {"mycrawler_redis:items"}
    assert_each_worker_crawled(workers)
    filtered = sum(worker.stats.get("dupefilter/filtered", 0) for worker in workers)
    assert filtered > PAGES  # the site links each page ~10 times


def test_myspider_redis_two_workers_with_persist(site, server, redis_url, tmp_path):
    """RedisSpider, SCHEDULER_PERSIST=True: fingerprints of every request kept, queue empty."""
    server.lpush("myspider:start_urls", json.dumps({"url": site.url}))
    settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": IDLE, "SCHEDULER_PERSIST": True}
    workers = crawl("myspider_redis", redis_url, tmp_path, settings=settings, arguments=DOMAIN)

    expected = expected_hits(PAGES)
    assert_hits(site.snapshot(), expected)
    assert_items(server, "myspider_redis", site, expected_pages(PAGES))
    # One fingerprint per URL requested but the start URL (start requests bypass the
    # filter, as in the original); retries of the /error/ pages are not filtered and add none.
    stored = {member.decode() for member in server.smembers("myspider_redis:dupefilter")}
    assert stored == fingerprints(site, set(expected) - {"/"})
    assert keys(server) == {"myspider_redis:items", "myspider_redis:dupefilter"}
    assert_each_worker_crawled(workers)


def test_each_worker_has_its_own_stats_beside_the_fleets(site, server, redis_url, tmp_path):
    """RedisStatsCollector: each worker dumps its own stats and the fleet's; its own
    response counts, also in its hash in Redis, add up to the fleet's."""
    server.lpush("myspider:start_urls", json.dumps({"url": site.url}))
    settings = {
        "MAX_IDLE_TIME_BEFORE_CLOSE": IDLE,
        "SCHEDULER_PERSIST": True,
        "STATS_CLASS": "scrapy_redis.stats.RedisStatsCollector",
    }
    workers = crawl("myspider_redis", redis_url, tmp_path, settings=settings, arguments=DOMAIN)

    assert_hits(site.snapshot(), expected_hits(PAGES))
    assert_each_worker_crawled(workers)
    fleet = {
        name.decode(): int(value)
        for name, value in server.hgetall("myspider_redis:stats").items()
        if value.isdigit()
    }
    own = [worker.stats["response_received_count"] for worker in workers]
    assert sum(own) == fleet["response_received_count"] >= PAGES
    for worker, count in zip(workers, own, strict=True):
        [worker_id] = re.findall(
            r"Dumping the fleet's stats \(myspider_redis:stats; this worker: (.+)\):", worker.log
        )
        assert "Dumping Scrapy stats:\n" in worker.log  # Scrapy's header: this worker's
        stored = server.hgetall(f"myspider_redis:stats:worker:{worker_id}")
        assert int(stored[b"response_received_count"]) == count
        assert server.hexists("myspider_redis:requests:workers", worker_id) is False  # left
        assert 0 < server.ttl(f"myspider_redis:stats:worker:{worker_id}") <= 86400
    # The last worker to close dumped the fleet's final totals.
    last = max(parse_stats(w.log, "the fleet")["response_received_count"] for w in workers)
    assert last == fleet["response_received_count"]
    assert {member.decode() for member in server.zrange("myspider_redis:stats:workers", 0, -1)} == {
        re.findall(r"; this worker: (.+)\):", worker.log)[0] for worker in workers
    }


def test_dmoz_interrupted_then_resumed_by_two_workers(site, server, redis_url, tmp_path):
    """A plain CrawlSpider on the Redis scheduler: Ctrl-C, then two workers resume the crawl.

    The start URL comes from ``start_urls`` (the spider argument ``start_url`` or
    DEMO_SITE_URL). A first worker is interrupted (SIGINT, as the README's Ctrl-C)
    part-way; SCHEDULER_PERSIST (the project's default) keeps the queue and the
    fingerprints. Then two workers are started at once and finish the crawl. Scrapy
    makes start-URL requests with ``dont_filter=True``, so each of the three
    processes fetches ``/`` once; every other URL goes through the shared
    dupefilter and is fetched once in all, whichever worker pops it, and nothing
    in flight at the interruption is lost. No page links back to ``/``, so its
    fingerprint is never stored. The workers stop when the shared queue is empty
    and the other worker is idle.
    """
    persist = {"SCHEDULER_PERSIST": True}  # the project's default, made explicit
    site_env = {"DEMO_SITE_URL": site.url}
    first = start_worker(
        "dmoz", redis_url, tmp_path / "dmoz-0.log", persist, {"start_url": site.url}
    )
    wait_for_requests(site, 300, first)
    first.process.send_signal(signal.SIGINT)
    wait_all([first], finish_reason="shutdown")
    assert server.exists("dmoz:requests"), "the crawl ended before it was interrupted"

    resumed = {**persist, "LOG_LEVEL": "INFO"}  # the quick start's level shows "Resuming crawl"
    workers = [
        start_worker("dmoz", redis_url, tmp_path / "dmoz-1.log", resumed, {"start_url": site.url}),
        start_worker("dmoz", redis_url, tmp_path / "dmoz-2.log", resumed, env=site_env),
    ]
    wait_all(workers)

    expected = expected_hits(PAGES)
    expected["/"] = 3
    assert_hits(site.snapshot(), expected)
    items = assert_items(server, "dmoz", site, expected_pages(PAGES) - {"/"})
    assert all(item["description"] for item in items)
    stored = {member.decode() for member in server.smembers("dmoz:dupefilter")}
    assert stored == fingerprints(site, set(expected) - {"/"})
    assert keys(server) == {"dmoz:items", "dmoz:dupefilter"}
    assert any("INFO: Resuming crawl (" in worker.log for worker in workers)


# -- the demo command and the items consumer -----------------------------------------------


def test_demo_command(server, redis_url):
    """``python example-project/demo.py``, run from the repository root, succeeds.

    With REDIS_URL set it uses that server, after deleting what an earlier run left.
    """
    server.rpush("mycrawler_redis:items", "an item of an earlier run")
    result = subprocess.run(
        [sys.executable, "example-project/demo.py", "--pages", str(PAGES), "--idle", str(IDLE)],
        cwd=ROOT,
        env={**os.environ, "REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=CRAWL_TIMEOUT + 30,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Deleted the keys of an earlier run: mycrawler_redis:items" in result.stdout
    assert "OK: every page was fetched once" in result.stdout
    assert f"pages crawled         {PAGES} of {PAGES}" in result.stdout


def test_process_items(server, redis_url):
    items = [{"name": f"Page {i}", "url": f"http://127.0.0.1/p/{i}.html"} for i in range(3)]
    server.rpush("demo:items", *(json.dumps(item) for item in items))
    options = ["--url", redis_url, "--limit", "3", "--timeout", "1", "--progress-every", "2"]
    result = subprocess.run(
        [sys.executable, "process_items.py", "demo:items", *options],
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{item['name']}\t{item['url']}" for item in items]
    assert "Processed 2 items" in result.stderr
    assert server.llen("demo:items") == 0


def test_start_urls_pushed_while_busy_are_picked_up_promptly(server, redis_url, tmp_path):
    """Start messages pushed mid-crawl are read by the 1 s poll, not at the next idle.

    The first new message goes to the end of the shared queue (same priority as
    the crawl's requests); the second asks for a higher priority and is fetched
    while the first crawl still runs.
    """
    with DemoSite(pages=400) as busy_site, DemoSite(pages=50) as new_site:
        server.lpush("myspider:start_urls", busy_site.url)
        settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": IDLE, "DOWNLOAD_DELAY": 0.02}
        worker = start_worker("myspider_redis", redis_url, tmp_path / "busy.log", settings, DOMAIN)
        wait_for_requests(busy_site, 100, worker)
        server.rpush("myspider:start_urls", new_site.url + "p/1.html")
        pushed = time.monotonic()
        while server.exists("myspider:start_urls", "myspider:start_urls:leases"):
            assert time.monotonic() - pushed < 5, "the start message was not read while busy"
            time.sleep(0.05)
        server.rpush("myspider:start_urls", json.dumps({"url": new_site.url, "priority": 10}))
        pushed = time.monotonic()
        while "/" not in new_site.snapshot():
            assert time.monotonic() - pushed < 5, "the priority start URL was not crawled"
            time.sleep(0.05)
        busy_hits = sum(busy_site.snapshot().values())
        wait_all([worker])
        assert busy_hits < sum(busy_site.snapshot().values()), "the crawl was not busy"
        assert "/p/1.html" in new_site.snapshot()
