"""The scheduler micro-benchmark's workload and readings, shared by its phases.

How the scheduler is built (as Scrapy's engine builds it), the requests it is fed
(what a spider yields after Scrapy's spider middlewares), how a phase is timed,
how requests go in and come out (ours and the original alike), and what is read
from Redis afterwards. Imported by sched_bench.py, in the interpreter of the
package measured.
"""

from __future__ import annotations

import gc
import sys
import time
from typing import Any

from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

import scrapy_redis
from scrapy_redis.scheduler import Scheduler

SECTIONS = (
    "garden-tools",
    "kitchen-appliances",
    "home-office",
    "outdoor-furniture",
    "lighting",
    "power-tools",
    "storage-solutions",
    "pet-supplies",
)
WORDS = (
    "stainless",
    "steel",
    "ergonomic",
    "compact",
    "wireless",
    "premium",
    "classic",
    "adjustable",
    "portable",
    "foldable",
    "cordless",
    "heavy",
    "duty",
    "desk",
)


class BenchSpider(Spider):
    name = "bench"

    def parse(self, response: Any) -> None:  # pragma: no cover - never called
        pass


def url_of(i: int) -> str:
    """A URL of a realistic length (~130 characters)."""
    slug = "-".join(WORDS[(i * k + k) % len(WORDS)] for k in (3, 5, 7, 11))
    return (
        f"https://www.example-shop.com/catalog/{SECTIONS[i % len(SECTIONS)]}/"
        f"item-{i:07d}-{slug}.html?ref=listing&page={i % 37}"
    )


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


#: Settings every scheduler built by :func:`build` gets on top of its own (sched_bench.py
#: ``--set NAME=VALUE``: e.g. another DUPEFILTER_CLASS, ours only).
EXTRA_SETTINGS: dict[str, str] = {}


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
    settings.update(EXTRA_SETTINGS)
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


class StandInEngine:
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
    return sum(
        int(server.execute_command("MEMORY", "USAGE", key, "SAMPLES", 0) or 0) for key in keys
    )


def uses_leases(crawler: Any) -> bool:
    """Whether the scheduler of ``crawler`` leased the requests it popped (our
    ``scheduler/leases/leased`` stat; the original has no leases)."""
    return bool(crawler.stats.get_value("scheduler/leases/leased", 0))


def class_path(obj: Any) -> str:
    return type(obj).__module__ + "." + type(obj).__name__


def origin() -> dict[str, Any]:
    """Which scrapy_redis this process imported, with which interpreter."""
    return {
        "package": getattr(scrapy_redis, "__version__", "?"),
        "module": scrapy_redis.__file__,
        "python": sys.executable,
    }
