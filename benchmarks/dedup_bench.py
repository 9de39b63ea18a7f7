"""Duplicate-filter micro-benchmark of ONE filter class, in the interpreter of its package.

dedup_run.py starts it with our interpreter (``PYTHONPATH`` = our src) or with the
original package's virtualenv (plus scrapy-redis-bloomfilter for the fork), on a
flushed redis-server. The filter is built as the Redis scheduler builds it
(``from_spider``) with the ``--set NAME=VALUE`` settings, then ``--n`` distinct
URLs are recorded through one path:

* ``seen``: ``request_seen(Request(url))`` per URL, as under Scrapy's scheduler;
* ``batch`` (ours): ``push_new()`` of batches of 100 fingerprints without entries,
  the dedup half of the scheduler's one-call-per-batch push script.

A trivial Lua script runs first (the server's one-time Lua allocation is not
counted per URL). Then ``--probe`` other new URLs are checked the same way: the share reported as
seen is the measured false-positive rate. Prints one JSON object: rates, client
CPU µs per URL, and Redis bytes per URL (``INFO memory`` delta / n).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import redis
from scrapy import Request, Spider
from scrapy.utils.misc import load_object
from scrapy.utils.test import get_crawler

BATCH = 100


def url(n: int) -> str:
    return f"http://site{n % 997}.example.com/catalog/item-{n}.html?ref={n * 7919 % 10007}"


def build(path: str, settings: dict[str, Any]) -> Any:
    spidercls = type("BenchSpider", (Spider,), {"name": "bench"})
    crawler = get_crawler(spidercls, settings)
    spider = spidercls.from_crawler(crawler)
    crawler.spider = spider
    return load_object(path).from_spider(spider)


def record_seen(df: Any, start: int, count: int) -> int:
    """``request_seen()`` of URLs start..start+count; how many were reported seen."""
    return sum(bool(df.request_seen(Request(url(n)))) for n in range(start, start + count))


def record_batch(df: Any, start: int, count: int) -> int:
    """Batches of BATCH in one call each: our push script's dedup for a filter our
    scheduler checks in it (``checks_in_script``), else the filter's own
    ``seen_many()``; how many were reported seen."""
    from scrapy_redis.queue import Candidate, FifoQueue

    queue = FifoQueue(df.server, Spider("bench"), "bench:unused-queue")
    seen = 0
    for first in range(start, start + count, BATCH):
        last = min(first + BATCH, start + count)
        fps = [df.request_fingerprint(Request(url(n))) for n in range(first, last)]
        if getattr(df, "checks_in_script", False):  # what our scheduler would do
            flags = queue.push_new([Candidate(fp, None) for fp in fps], df)
            seen += flags.count(False)
        else:
            seen += sum(df.seen_many(fps))
    return seen


def measure(df: Any, server: Any, path: str, n: int, probe: int) -> dict[str, float]:
    record = record_batch if path == "batch" else record_seen
    # The first Lua call on a server allocates ~0.3 MB once, whatever the filter: made
    # before the reading, so that it is not counted per URL (the filter itself is not
    # touched: a Bloom filter's first write allocates a block, which is counted).
    server.eval("return 1", 0)
    memory = server.info("memory")["used_memory"]
    wall, cpu = time.perf_counter(), time.process_time()
    repeated = record(df, 0, n)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    grown = server.info("memory")["used_memory"] - memory
    false_seen = record(df, n, probe) if probe else 0
    return {
        "rate": n / wall,
        "cpu_us": cpu / n * 1e6,
        "bytes_per_url": grown / n,
        "reported_seen_of_new": repeated,
        "false_positive_rate": false_seen / probe if probe else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--filter", required=True, help="the filter class's dotted path")
    parser.add_argument("--path", choices=["seen", "batch"], default="seen")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--probe", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    settings: dict[str, Any] = {"REDIS_URL": args.redis_url, "LOG_LEVEL": "WARNING"}
    settings.update(pair.split("=", 1) for pair in args.set)
    server = redis.Redis.from_url(args.redis_url)
    server.flushdb()
    df = build(args.filter, settings)
    result = measure(df, server, args.path, args.n, args.probe)
    import scrapy_redis

    module = scrapy_redis.__file__
    print(
        json.dumps(
            {"filter": args.filter, "module": module, "path": args.path, "n": args.n, **result}
        )
    )


if __name__ == "__main__":
    main()
