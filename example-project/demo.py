#!/usr/bin/env python
"""Crawl a local demo site with two scrapy-redis workers sharing one Redis queue.

Run from anywhere (``bash example-project/demo.sh`` also installs what is missing)::

    python example-project/demo.py [--pages 2000] [--workers 2]

1. Uses the Redis server at $REDIS_URL, or starts a throwaway ``redis-server``
   on a free loopback port (no persistence) and stops it at the end.
2. Serves the demo site (``demo_site.py``) on a free loopback port.
3. Pushes the site's URL to ``mycrawler:start_urls`` and starts the workers:
   ``scrapy crawl mycrawler_redis`` processes that share the request queue and
   the duplicate filter, and stop after MAX_IDLE_TIME_BEFORE_CLOSE idle seconds.
4. Shows the progress every second, then a summary, and checks that every page
   was fetched exactly once and scraped into exactly one item. Exits with 1 if
   anything went wrong (the workers' logs are then kept and their path printed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from demo_site import DemoSite, expected_hits, expected_pages
from scrapy import Spider

from scrapy_redis.connection import describe_server
from scrapy_redis.queue import PriorityQueue

HERE = Path(__file__).resolve().parent
SPIDER = "mycrawler_redis"
START_KEY = "mycrawler:start_urls"
ITEMS_KEY = f"{SPIDER}:items"
QUEUE_KEY = f"{SPIDER}:requests"
DUPEFILTER_KEY = f"{SPIDER}:dupefilter"
#: Log lines that mean something went wrong in a worker.
PROBLEMS = re.compile(r"Traceback|\] (ERROR|CRITICAL):|DeprecationWarning")


# -- Redis --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def throwaway_redis() -> Iterator[str]:
    """A ``redis-server`` on a free loopback port, without persistence; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit(
            "redis-server not found: install it (apt-get install redis-server) or set REDIS_URL"
        )
    port, workdir = free_port(), tempfile.mkdtemp(prefix="scrapy-redis-demo-redis-")
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        wait_for_redis(url, process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def wait_for_redis(url: str, process: subprocess.Popen[bytes], timeout: float = 10) -> None:
    client = redis.Redis.from_url(url, socket_connect_timeout=0.2)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                sys.exit(f"redis-server exited with code {process.returncode}")
            with contextlib.suppress(redis.ConnectionError):
                client.ping()
                return
            time.sleep(0.05)
    finally:
        client.close()
    sys.exit(f"redis-server did not answer at {url} within {timeout}s")


def clear_demo_keys(client: redis.Redis[bytes]) -> None:
    """Delete what an earlier demo left in Redis (only this demo's keys)."""
    found = [_text(key) for key in client.scan_iter(match=f"{SPIDER}:*")]
    keys = sorted(key for key in {START_KEY, *found} if client.exists(key))
    if keys:
        client.delete(*keys)
        print(f"Deleted the keys of an earlier run: {', '.join(keys)}")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- workers ------------------------------------------------------------------------------


@dataclass
class Worker:
    number: int
    process: subprocess.Popen[bytes]
    log: Path
    stats: dict[str, Any] = field(default_factory=dict)

    def read_log(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def start_worker(number: int, redis_url: str, log_dir: Path, idle: float) -> Worker:
    """One ``scrapy crawl`` process, logging (INFO, stats included) to its own file."""
    log = log_dir / f"worker-{number}.log"
    settings = {
        "MAX_IDLE_TIME_BEFORE_CLOSE": idle,
        "SCHEDULER_PERSIST": False,  # the last worker to stop deletes queue and fingerprints
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
    }
    command = [sys.executable, "-m", "scrapy", "crawl", SPIDER, "-a", "domain=127.0.0.1"]
    command += [arg for name, value in settings.items() for arg in ("-s", f"{name}={value}")]
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONWARNINGS": "default"}
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT)
    return Worker(number, process, log)


def stop_workers(workers: list[Worker]) -> None:
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.terminate()
    for worker in workers:
        try:
            worker.process.wait(15)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait()


_STAT = re.compile(r"^ ?[{ ]'([^']+)': (\d+|'[^']*'),?", re.MULTILINE)


#: The header of a stats dump: Scrapy's (this worker's stats, also RedisStatsCollector's
#: first), or RedisStatsCollector's second, the fleet's: "Dumping the fleet's stats (...):".
_DUMP = re.compile(r"Dumping (?:Scrapy stats|(the fleet)'s stats \([^\n]*\)):\n")


def parse_stats(log: str, whose: str = "this worker") -> dict[str, Any]:
    """The integer and string stats of the last ``Dumping Scrapy stats`` block of a log:
    this worker's (Scrapy's only dump, or RedisStatsCollector's first), or with
    ``whose="the fleet"`` the fleet's (RedisStatsCollector's second)."""
    headers = list(_DUMP.finditer(log))
    blocks = {}
    for header, after in zip(headers, [*headers[1:], None], strict=True):
        blocks[header.group(1) or "this worker"] = log[header.end() : after and after.start()]
    return {
        name: value.strip("'") if value.startswith("'") else int(value)
        for name, value in _STAT.findall(blocks.get(whose, ""))
    }


# -- progress -----------------------------------------------------------------------------


def queued_requests(client: redis.Redis[bytes]) -> int:
    """Requests in the shared queue, whichever SCHEDULER_QUEUE_CLASS the project uses."""
    kind = client.type(QUEUE_KEY)
    if kind == b"list":  # FifoQueue, LifoQueue
        return int(client.llen(QUEUE_KEY))
    if kind == b"zset":  # PriorityQueue
        return len(PriorityQueue(client, Spider(name=SPIDER), QUEUE_KEY))
    return 0


@dataclass
class Observer:
    """Reads the crawl's progress from the site's hit counter and from Redis."""

    client: redis.Redis[bytes]
    site: DemoSite

    def line(self, elapsed: float, workers: list[Worker]) -> str:
        hits = self.site.snapshot()
        pages = sum(1 for path in hits if path.startswith("/p/"))
        running = sum(worker.process.poll() is None for worker in workers)
        return (
            f"{elapsed:6.1f}s  pages {pages:>5}/{self.site.pages}  requests {sum(hits.values()):>5}"
            f"  items {self.client.llen(ITEMS_KEY):>5}  queued {queued_requests(self.client):>5}"
            f"  fingerprints {self.client.scard(DUPEFILTER_KEY):>5}  workers running {running}"
        )


def watch(observer: Observer, workers: list[Worker], started: float, timeout: float) -> bool:
    """Print the progress every second until the workers exit; False on timeout."""
    while any(worker.process.poll() is None for worker in workers):
        print(observer.line(time.monotonic() - started, workers), flush=True)
        if time.monotonic() - started > timeout:
            print(f"Timeout: the workers still run after {timeout:.0f}s, stopping them.")
            return False
        time.sleep(1)
    print(observer.line(time.monotonic() - started, workers), flush=True)
    return True


# -- summary ------------------------------------------------------------------------------


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, label: str, text: str) -> None:
        self.lines.append(f"  {label:<22}{text}")

    def check(self, ok: bool, problem: str) -> None:
        if not ok:
            self.problems.append(problem)


def summarize(
    client: redis.Redis[bytes], site: DemoSite, workers: list[Worker], started: float
) -> Report:
    """What the crawl did, and what went wrong."""
    report = Report()
    for worker in workers:
        worker.stats = parse_stats(worker.read_log())
    report_site(report, site, started)
    report_items(report, client, site)
    filtered = sum(worker.stats.get("dupefilter/filtered", 0) for worker in workers)
    report.add("duplicates filtered", f"{filtered} requests (dupefilter/filtered, all workers)")
    report_workers(report, workers)
    leftover = sorted(_text(key) for key in client.scan_iter(match=f"{QUEUE_KEY}*"))
    leftover += [DUPEFILTER_KEY] if client.exists(DUPEFILTER_KEY) else []
    report.add("shared keys left", ", ".join(leftover) or "none (deleted by the last worker)")
    report.check(not leftover, f"keys left in Redis: {leftover}")
    return report


def report_site(report: Report, site: DemoSite, started: float) -> None:
    """Pages fetched, from the site's hit counter: each exactly once."""
    hits = site.snapshot()
    expected = expected_hits(site.pages, site.seed, site.error_failures)
    pages = sum(1 for path in hits if path.startswith("/p/"))
    twice = sorted(path for path, count in hits.items() if count > expected.get(path, 1))
    missed = sorted(set(expected) - set(hits))
    crawl_time = (site.last_hit or started) - started
    report.add("pages crawled", f"{pages} of {site.pages}")
    report.add("requests to the site", f"{sum(hits.values())} (redirects, 404s and 500s included)")
    report.add("pages fetched twice", str(len(twice)))
    report.add(
        "time",
        f"{crawl_time:.1f}s to crawl ({pages / max(crawl_time, 1e-9):.0f} pages/s), "
        f"{time.monotonic() - started:.1f}s until the last worker stopped",
    )
    report.check(not missed, f"{len(missed)} paths never fetched, e.g. {missed[:5]}")
    report.check(not twice, f"{len(twice)} paths fetched too often, e.g. {twice[:5]}")


def report_items(report: Report, client: redis.Redis[bytes], site: DemoSite) -> None:
    """Items in Redis: one per page answered with 200, but the start page."""
    items = [json.loads(raw) for raw in client.lrange(ITEMS_KEY, 0, -1)]
    urls = {item["url"] for item in items}
    # A CrawlSpider makes no item of its start page.
    wanted = {site.url.rstrip("/") + path for path in expected_pages(site.pages, site.seed)}
    wanted.discard(site.url)
    retried = sum(1 for url in wanted if "/error/" in url)
    report.add("items", f"{len(items)} in {ITEMS_KEY} ({len(urls)} distinct URLs)")
    report.add(
        "",
        f"one per page: the {len(wanted) - retried} pages, and {retried} /error/ pages that "
        "answered 500 once, then 200 when Scrapy retried them",
    )
    report.check(len(items) == len(urls), f"{len(items) - len(urls)} duplicate items")
    report.check(urls == wanted, f"items: {len(wanted ^ urls)} URLs missing or unexpected")


def report_workers(report: Report, workers: list[Worker]) -> None:
    """What each worker did (from its stats), and whether it stopped cleanly."""
    for worker in workers:
        stats = worker.stats
        report.add(
            f"worker {worker.number}",
            f"{stats.get('response_received_count', 0)} responses, "
            f"{stats.get('item_scraped_count', 0)} items, "
            f"{stats.get('dupefilter/filtered', 0)} duplicates filtered, "
            f"exit code {worker.process.returncode}, {stats.get('finish_reason', 'no stats')}",
        )
        report.check(
            worker.process.returncode == 0 and stats.get("finish_reason") == "finished",
            f"worker {worker.number} failed (exit code {worker.process.returncode})",
        )
        bad = [line for line in worker.read_log().splitlines() if PROBLEMS.search(line)]
        report.check(not bad, f"worker {worker.number} logged problems, e.g. {bad[:3]}")


# -- main ---------------------------------------------------------------------------------


def connect(redis_url: str) -> redis.Redis[bytes]:
    client: redis.Redis[bytes] = redis.Redis.from_url(redis_url)
    try:
        client.ping()
    except redis.RedisError as exc:
        sys.exit(f"Cannot use the Redis server at {describe_server(client)}: {exc}")
    return client


def logs_note(log_dir: Path, keep: bool) -> str:
    if keep:
        return f"their logs go to {log_dir}"
    return (
        f"their logs go to {log_dir} and are deleted at the end unless something goes "
        "wrong; --log-dir DIR keeps them"
    )


def run(args: argparse.Namespace, redis_url: str, log_dir: Path) -> int:
    client = connect(redis_url)
    clear_demo_keys(client)
    with DemoSite(pages=args.pages) as site:
        print(f"Demo site: {site.url} ({args.pages} pages); Redis: {describe_server(client)}")
        client.lpush(START_KEY, site.url)
        print(
            f"Pushed {site.url} to {START_KEY}; starting {args.workers} workers: "
            f"{logs_note(log_dir, args.log_dir is not None)}"
        )
        observer = Observer(client, site)
        started = time.monotonic()
        workers = [
            start_worker(n, redis_url, log_dir, args.idle) for n in range(1, args.workers + 1)
        ]
        try:
            finished = watch(observer, workers, started, args.timeout)
        finally:
            stop_workers(workers)
        report = summarize(client, site, workers, started)
    report.check(finished, f"the workers did not stop within {args.timeout:.0f}s")
    print("\nSummary")
    print("\n".join(report.lines))
    print(f"  (the workers stop after {args.idle:g}s without work: MAX_IDLE_TIME_BEFORE_CLOSE)")
    if report.problems:
        print("\nFAILED:\n  " + "\n  ".join(report.problems))
        return 1
    print("\nOK: every page was fetched once and scraped into exactly one item.")
    print(WHAT_NEXT)
    return 0


WHAT_NEXT = """
What next
  - More workers, a bigger site: bash example-project/demo.sh --workers 4 --pages 10000
  - The same crawl by hand, one worker per terminal (or per machine), and the other
    example spiders: example-project/README.rst, "Step by step"
  - Look at a running crawl: scrapy redis status (or watch, or dashboard) in
    example-project, with REDIS_URL set: docs/commands.rst, docs/dashboard.rst
  - Distribute your own project: the settings and the spider in README.rst, then
    docs/quickstart.rst; every setting: docs/settings.rst"""


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=positive, default=2000, help="pages of the demo site")
    parser.add_argument("--workers", type=positive, default=2, help="scrapy crawl processes")
    parser.add_argument("--idle", type=float, default=5, help="MAX_IDLE_TIME_BEFORE_CLOSE")
    parser.add_argument("--timeout", type=float, default=600, help="stop the workers after this")
    parser.add_argument("--log-dir", type=Path, help="keep the workers' logs here")
    args = parser.parse_args(argv)

    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="scrapy-redis-demo-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        redis_url = os.environ.get("REDIS_URL") or stack.enter_context(throwaway_redis())
        status = run(args, redis_url, log_dir)
    if status == 0 and args.log_dir is None:
        shutil.rmtree(log_dir, ignore_errors=True)
    elif status:
        print(f"Workers' logs: {log_dir}")
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
