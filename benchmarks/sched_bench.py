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

Options for the cost of leases (our package only):

* ``--unleased``: ``SCHEDULER_QUEUE_CLASS = unleased_queues.Unleased<queue>``
  (benchmarks/unleased_queues.py: pop() overridden, so the scheduler leases nothing);
* ``--skip-dup``: no phase 4;
* ``--paired`` (what run.py uses): ours with leases and ours without, side by
  side in this one process, so that the load of the shared machine falls on
  both alike. Two schedulers, each built as above, on their own queue and
  dupefilter keys (``bench:requests:leased`` / ``bench:requests:unleased``...),
  timed in alternating blocks of ``--block`` requests (which one goes first
  alternates too), wall and CPU time summed per scheduler:

  1. enqueue ``n`` new requests into each;
  2. dequeue + ack, the first half: a stand-in engine is attached
     (``crawler.engine._slot.inprogress``, an empty set), so that, as in a
     crawl, each ``next_request`` finds the request handed out before done and
     acknowledges its lease (one ack script per pop with leases);
  3. dequeue, pop only, the second half: no engine, as in phase 3 above, so
     leases are recorded and never acknowledged.

  Without leases phases 2 and 3 run the same code.

Prints one JSON object. Usage::

    python sched_bench.py --redis-url redis://127.0.0.1:PORT/0 --queue FifoQueue --n 10000
"""

from __future__ import annotations

import argparse
import gc
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


def queue_class_path(queue: str, unleased: bool) -> str:
    return f"unleased_queues.Unleased{queue}" if unleased else f"scrapy_redis.queue.{queue}"


def build(
    redis_url: str, queue: str, unleased: bool = False, key_suffix: str = ""
) -> tuple[Any, Spider]:
    settings: dict[str, Any] = {
        "REDIS_URL": redis_url,
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "SCHEDULER_QUEUE_CLASS": queue_class_path(queue, unleased),
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        "SCHEDULER_PERSIST": True,
        "LOG_LEVEL": "WARNING",
    }
    if key_suffix:
        settings["SCHEDULER_QUEUE_KEY"] = f"%(spider)s:requests{key_suffix}"
        settings["SCHEDULER_DUPEFILTER_KEY"] = f"%(spider)s:dupefilter{key_suffix}"
    crawler = get_crawler(BenchSpider, settings)
    spider = crawler._create_spider()
    crawler.spider = spider
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(spider)
    return scheduler, spider


def timed(func: Any, *args: Any, collect: bool = True) -> tuple[Any, float, float]:
    """(result, wall seconds, CPU seconds of this process).

    Starts from a collected heap: a full collection of Python's garbage collector
    (~50 ms here, the objects of Scrapy and of the requests built for the
    benchmark) otherwise falls into a phase of a few hundred ms or not, depending
    on what the earlier phases allocated. The collections the timed code causes
    itself still count. ``collect=False`` for the short blocks of ``--paired``,
    where the two variants alternate and share such collections alike.
    """
    if collect:
        gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    result = func(*args)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def enqueue_all(scheduler: Any, requests: list[Request]) -> int:
    """Enqueue ``requests``; how many were new.

    Ours buffers enqueued requests (SCHEDULER_ENQUEUE_DELAY): the timed phase
    ends with ``send_enqueued()``, so that everything is in Redis when it ends,
    and duplicates are counted from ``dupefilter/filtered`` (ours reports them
    when the batch is sent; the original returns False from enqueue_request and
    counts nothing).
    """
    enqueue = scheduler.enqueue_request
    send = getattr(scheduler, "send_enqueued", None)
    if send is None:
        return sum(1 for request in requests if enqueue(request))
    filtered = scheduler.stats.get_value("dupefilter/filtered", 0)
    for request in requests:
        enqueue(request)
    send()
    return len(requests) - (scheduler.stats.get_value("dupefilter/filtered", 0) - filtered)


def dequeue_all(scheduler: Any) -> int:
    pop = scheduler.next_request
    count = 0
    while pop() is not None:
        count += 1
    return count


def dequeue_some(scheduler: Any, count: int) -> int:
    pop = scheduler.next_request
    return sum(1 for _ in range(count) if pop() is not None)


class _StandInEngine:
    """What our scheduler reads of Scrapy's engine to acknowledge leases.

    ``_slot.inprogress`` is empty: every request handed out earlier is done.
    """

    def __init__(self) -> None:
        self._slot = type("Slot", (), {"inprogress": set(), "nextcall": None, "closing": None})()
        self.running = True


def leased_entries(server: Any, key: Any) -> int:
    """Requests still leased in the leases hash ``key`` (ours: one record per pop, its
    entries ``False`` once done)."""
    import msgpack  # only ours writes leases: the original's venv may not have msgpack

    return sum(
        sum(1 for entry in msgpack.unpackb(record, raw=True)[4:] if entry is not False)
        for record in server.hvals(key)
    )


def lease_count(server: Any) -> int:
    """Requests leased in the leases hash(es) (ours with leases; 0 otherwise)."""
    keys = server.scan_iter(match="*:leases", count=1000)
    return sum(leased_entries(server, key) for key in keys)


def memory_usage(server: Any, keys: list[bytes]) -> int:
    return sum(int(server.execute_command("MEMORY", "USAGE", key, "SAMPLES", 0) or 0)
               for key in keys)


def run(
    redis_url: str, queue: str, n: int, unleased: bool = False, skip_dup: bool = False
) -> dict[str, Any]:
    server = redis.Redis.from_url(redis_url)
    server.flushall()
    scheduler, spider = build(redis_url, queue, unleased)
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
    leases_left = lease_count(server)  # before close() gives them back
    uses_leases = getattr(scheduler, "_book", None) is not None
    scheduler.close("finished")

    dup: dict[str, Any] = {}
    half = n // 2
    dup_accepted = half
    if not skip_dup:
        server.flushall()
        scheduler, spider = build(redis_url, queue, unleased)
        uniques = [make_request(spider, 10 * n + k) for k in range(half)]
        again = [make_request(spider, 10 * n + k // 2) for k in range(half)]  # already seen
        mixed = [r for pair in zip(uniques, again, strict=True) for r in pair]
        dup_accepted, dup_wall, dup_cpu = timed(enqueue_all, scheduler, mixed)
        scheduler.close("finished")
        dup = {
            "dup_enqueue_rate": len(mixed) / dup_wall,
            "dup_enqueue_cpu_us": dup_cpu / len(mixed) * 1e6,
        }
    server.flushall()

    return {
        "package": getattr(scrapy_redis, "__version__", "?"),
        "module": scrapy_redis.__file__,
        "python": sys.executable,
        "scrapy": scrapy.__version__,
        "redis_py": redis.__version__,
        "queue": queue,
        "queue_class": type(scheduler.queue).__module__ + "." + type(scheduler.queue).__name__,
        "uses_leases": uses_leases,
        "leases_left_after_dequeue": leases_left,
        "n": n,
        "enqueue_rate": n / enq_wall,
        "enqueue_cpu_us": enq_cpu / n * 1e6,
        "dequeue_rate": dequeued / deq_wall if deq_wall else 0.0,
        "dequeue_cpu_us": deq_cpu / max(dequeued, 1) * 1e6,
        **dup,
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


PAIRED = (("ours", False, ":leased"), ("ours-unleased", True, ":unleased"))


def run_paired(redis_url: str, queue: str, n: int, block: int) -> dict[str, Any]:
    """Ours with leases and without, interleaved in blocks (see the module docstring)."""
    server = redis.Redis.from_url(redis_url)
    server.flushall()
    built = {name: build(redis_url, queue, unleased, suffix) for name, unleased, suffix in PAIRED}
    scheds = {name: sched for name, (sched, _) in built.items()}
    requests = {name: [make_request(spider, i) for i in range(n)]
                for name, (_, spider) in built.items()}
    totals = {name: {phase: [0, 0.0, 0.0] for phase in ("enqueue", "ack", "noack")}
              for name in scheds}  # [requests, wall s, CPU s]

    def alternate(phase: str, starts: range, size: int, op: Any) -> None:
        for index, start in enumerate(starts):
            names = [name for name, _, _ in PAIRED]
            for name in names if index % 2 == 0 else names[::-1]:
                count = min(size, stop_of[phase] - start)
                done, wall, cpu = timed(op, scheds[name], name, start, count, collect=False)
                total = totals[name][phase]
                total[0] += done
                total[1] += wall
                total[2] += cpu

    def enqueue_block(sched: Any, name: str, start: int, count: int) -> int:
        return enqueue_all(sched, requests[name][start:start + count])

    def dequeue_block(sched: Any, name: str, start: int, count: int) -> int:
        return dequeue_some(sched, count)

    half = n // 2
    stop_of = {"enqueue": n, "ack": half, "noack": n}
    alternate("enqueue", range(0, n, block), block, enqueue_block)
    acked0 = {}
    for name, sched in scheds.items():
        sched.crawler.engine = _StandInEngine()
        acked0[name] = sched.crawler.stats.get_value("scheduler/leases/acked", 0)
    alternate("ack", range(0, half, block), block, dequeue_block)
    for sched in scheds.values():
        sched.crawler.engine = None
    alternate("noack", range(half, n, block), block, dequeue_block)

    variants: dict[str, Any] = {}
    for name, sched in scheds.items():
        t = totals[name]
        left = sched.next_request()  # untimed: the queue must be empty now
        variants[name] = {
            "queue_class": type(sched.queue).__module__ + "." + type(sched.queue).__name__,
            "uses_leases": getattr(sched, "_book", None) is not None,
            "enqueue_rate": t["enqueue"][0] / t["enqueue"][1],
            "enqueue_cpu_us": t["enqueue"][2] / max(t["enqueue"][0], 1) * 1e6,
            "dequeue_ack_rate": t["ack"][0] / t["ack"][1],
            "dequeue_ack_cpu_us": t["ack"][2] / max(t["ack"][0], 1) * 1e6,
            "dequeue_noack_rate": t["noack"][0] / t["noack"][1],
            "dequeue_noack_cpu_us": t["noack"][2] / max(t["noack"][0], 1) * 1e6,
            "acked": sched.crawler.stats.get_value("scheduler/leases/acked", 0) - acked0[name],
            "leases_left": leased_entries(server, f"{sched.queue.key}:leases"),
            "checks": {"enqueued": t["enqueue"][0], "dequeued_ack": t["ack"][0],
                       "dequeued_noack": t["noack"][0], "left": left is not None},
            "ok": t["enqueue"][0] == n and t["ack"][0] + t["noack"][0] == n and left is None,
        }
    for sched in scheds.values():
        sched.close("finished")
    server.flushall()
    return {
        "package": getattr(scrapy_redis, "__version__", "?"),
        "module": scrapy_redis.__file__,
        "python": sys.executable,
        "queue": queue,
        "n": n,
        "block": block,
        "variants": variants,
        "ok": all(v["ok"] for v in variants.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--queue", required=True,
                        choices=["FifoQueue", "LifoQueue", "PriorityQueue"])
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--unleased", action="store_true",
                        help="ours only: unleased_queues.Unleased<queue> (no leases)")
    parser.add_argument("--skip-dup", action="store_true", help="no 50%%-duplicates phase")
    parser.add_argument("--paired", action="store_true",
                        help="ours with and without leases, interleaved (cost of leases)")
    parser.add_argument("--block", type=int, default=200,
                        help="--paired: requests per timed block (default 200)")
    args = parser.parse_args()
    if args.paired:
        print(json.dumps(run_paired(args.redis_url, args.queue, args.n, args.block)))
    else:
        print(json.dumps(run(args.redis_url, args.queue, args.n, unleased=args.unleased,
                             skip_dup=args.skip_dup)))


if __name__ == "__main__":
    main()
