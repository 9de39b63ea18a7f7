"""Scheduler micro-benchmark for ONE package and ONE queue class, in its own interpreter.

run.py starts it with our interpreter (``PYTHONPATH=src``) or with the original
package's virtualenv, so it only uses what both packages offer: the scheduler is
built the way Scrapy's engine builds it (``get_crawler`` +
``Scheduler.from_crawler`` + ``open(spider)``), then timed through
``enqueue_request`` / ``next_request``:

1. enqueue ``n`` new requests (each one goes through the dupefilter);
2. Redis memory of what is stored: ``MEMORY USAGE`` (``SAMPLES 0``) of the queue
   key(s) and of the dupefilter set, and the ``INFO memory used_memory`` delta;
3. dequeue them all (``next_request`` until it returns None);
4. on a flushed database and a new scheduler, enqueue ``n`` requests of which
   half are duplicates of earlier ones (new Request objects with the same URL).

Prints one JSON object. Usage::

    python sched_bench.py --redis-url redis://127.0.0.1:PORT/0 --queue FifoQueue --n 10000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import redis
import scrapy
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

import scrapy_redis
from scrapy_redis.scheduler import Scheduler

SECTIONS = ("garden-tools", "kitchen-appliances", "home-office", "outdoor-furniture",
            "lighting", "power-tools", "storage-solutions", "pet-supplies")
WORDS = ("stainless", "steel", "ergonomic", "compact", "wireless", "premium", "classic",
         "adjustable", "portable", "foldable", "cordless", "heavy", "duty", "desk")


class BenchSpider(Spider):
    name = "bench"

    def parse(self, response: Any) -> None:  # pragma: no cover - never called
        pass


def url_of(i: int) -> str:
    """A URL of a realistic length (~130 characters)."""
    slug = "-".join(WORDS[(i * k + k) % len(WORDS)] for k in (3, 5, 7, 11))
    return (f"https://www.example-shop.com/catalog/{SECTIONS[i % len(SECTIONS)]}/"
            f"item-{i:07d}-{slug}.html?ref=listing&page={i % 37}")


def make_request(spider: Spider, i: int) -> Request:
    """What a spider yields after Scrapy's spider middlewares: Referer header, depth meta."""
    return Request(
        url_of(i),
        callback=spider.parse,
        headers={"Referer": url_of(i // 10)},
        meta={"depth": 3 + i % 3, "category": SECTIONS[i % len(SECTIONS)], "listing_page": i % 37},
        priority=-1 if i % 4 == 3 else 0,
    )


def build(redis_url: str, queue: str) -> tuple[Any, Spider]:
    settings = {
        "REDIS_URL": redis_url,
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue}",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        "SCHEDULER_PERSIST": True,
        "LOG_LEVEL": "WARNING",
    }
    crawler = get_crawler(BenchSpider, settings)
    spider = crawler._create_spider()
    crawler.spider = spider
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(spider)
    return scheduler, spider


def timed(func: Any, *args: Any) -> tuple[Any, float, float]:
    """(result, wall seconds, CPU seconds of this process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = func(*args)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def enqueue_all(scheduler: Any, requests: list[Request]) -> int:
    enqueue = scheduler.enqueue_request
    return sum(1 for request in requests if enqueue(request))


def dequeue_all(scheduler: Any) -> int:
    pop = scheduler.next_request
    count = 0
    while pop() is not None:
        count += 1
    return count


def memory_usage(server: Any, keys: list[bytes]) -> int:
    return sum(int(server.execute_command("MEMORY", "USAGE", key, "SAMPLES", 0) or 0)
               for key in keys)


def run(redis_url: str, queue: str, n: int) -> dict[str, Any]:
    server = redis.Redis.from_url(redis_url)
    server.flushall()
    scheduler, spider = build(redis_url, queue)
    requests = [make_request(spider, i) for i in range(n)]
    mem_before = int(server.info("memory")["used_memory"])

    accepted, enq_wall, enq_cpu = timed(enqueue_all, scheduler, requests)

    mem_after = int(server.info("memory")["used_memory"])
    df_key = scheduler.df.key.encode()
    keys = list(server.scan_iter(count=1000))
    queue_keys = [k for k in keys if k != df_key and not k.endswith(b":workers")]
    queue_bytes = memory_usage(server, queue_keys)
    df_bytes = memory_usage(server, [df_key])

    dequeued, deq_wall, deq_cpu = timed(dequeue_all, scheduler)
    scheduler.close("finished")

    server.flushall()
    scheduler, spider = build(redis_url, queue)
    half = n // 2
    uniques = [make_request(spider, 10 * n + k) for k in range(half)]
    again = [make_request(spider, 10 * n + k // 2) for k in range(half)]  # already seen
    mixed = [r for pair in zip(uniques, again, strict=True) for r in pair]
    dup_accepted, dup_wall, dup_cpu = timed(enqueue_all, scheduler, mixed)
    scheduler.close("finished")
    server.flushall()

    return {
        "package": getattr(scrapy_redis, "__version__", "?"),
        "module": scrapy_redis.__file__,
        "python": sys.executable,
        "scrapy": scrapy.__version__,
        "redis_py": redis.__version__,
        "queue": queue,
        "n": n,
        "enqueue_rate": n / enq_wall,
        "enqueue_cpu_us": enq_cpu / n * 1e6,
        "dequeue_rate": dequeued / deq_wall if deq_wall else 0.0,
        "dequeue_cpu_us": deq_cpu / max(dequeued, 1) * 1e6,
        "dup_enqueue_rate": len(mixed) / dup_wall,
        "dup_enqueue_cpu_us": dup_cpu / len(mixed) * 1e6,
        "queue_bytes_per_request": queue_bytes / n,
        "df_bytes_per_fingerprint": df_bytes / n,
        "used_memory_per_request": (mem_after - mem_before) / n,
        "queue_keys": sorted(k.decode() for k in queue_keys),
        "checks": {
            "accepted": accepted, "dequeued": dequeued,
            "dup_accepted": dup_accepted, "dup_expected": half,
        },
        "ok": accepted == n and dequeued == n and dup_accepted == half,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--queue", required=True,
                        choices=["FifoQueue", "LifoQueue", "PriorityQueue"])
    parser.add_argument("--n", type=int, default=10000)
    args = parser.parse_args()
    print(json.dumps(run(args.redis_url, args.queue, args.n)))


if __name__ == "__main__":
    main()
