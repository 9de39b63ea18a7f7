"""Shared test helpers: spiders and crawlers built the way Scrapy builds them."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from scrapy import Spider
from scrapy.utils.test import get_crawler


class DemoSpider(Spider):
    name = "demo"

    def parse(self, response):  # pragma: no cover - never downloaded in unit tests
        return None

    def parse_item(self, response):  # pragma: no cover
        return None

    def on_error(self, failure):  # pragma: no cover
        return None


def ensure_reactor() -> None:
    """Install the reactor ``scrapy crawl`` installs (Scrapy 2.13's test helpers need one)."""
    if "twisted.internet.reactor" not in sys.modules:
        from scrapy.utils.reactor import install_reactor

        install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")


def make_spider(
    settings: dict[str, Any] | None = None, spidercls: type[Spider] = DemoSpider, **kwargs: Any
) -> Spider:
    """A spider bound to a fresh crawler configured by ``settings``."""
    ensure_reactor()  # also in spawned worker processes
    crawler = get_crawler(spidercls, settings or {})
    spider = crawler.spidercls.from_crawler(crawler, **kwargs)
    crawler.spider = spider
    return spider


def command_calls(server, name: str) -> int:
    return int(server.info("commandstats").get(f"cmdstat_{name}", {}).get("calls", 0))


class Calls:
    """How many times the client sent ``names`` since the last check."""

    def __init__(self, server, *names: str) -> None:
        self.server, self.names = server, names
        self.since = self._now()

    def _now(self) -> dict[str, int]:
        return {name: command_calls(self.server, name) for name in self.names}

    def __call__(self) -> dict[str, int]:
        now = self._now()
        delta = {name: now[name] - self.since[name] for name in self.names}
        self.since = self._now()  # INFO itself is not among the names
        return delta


@contextlib.contextmanager
def round_trips() -> Iterator[list[bytes]]:
    """The sends to Redis this thread makes in the block (a command, or a pipeline's
    commands to one server: a round trip each), each as the bytes sent, appended to the
    list yielded. Counts what redis-py's connections send (a real server answers)."""
    from redis.connection import AbstractConnection

    sent: list[bytes] = []
    send, thread = AbstractConnection.send_packed_command, threading.get_ident()

    def counted(connection: Any, command: Any, check_health: bool = True) -> None:
        if threading.get_ident() == thread:
            parts = [command] if isinstance(command, (bytes, str)) else command
            sent.append(b"".join(p.encode() if isinstance(p, str) else bytes(p) for p in parts))
        send(connection, command, check_health)

    AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        AbstractConnection.send_packed_command = send  # type: ignore[method-assign]


def open_scheduler(settings: dict[str, Any], cls: Any = None, reactor: Any = None) -> Any:
    """A Redis scheduler built and opened as Scrapy's engine does it; its timers run on
    ``reactor`` if given (a ``task.Clock``)."""
    from scrapy.utils.misc import build_from_crawler

    from scrapy_redis.scheduler import Scheduler

    crawler = get_crawler(DemoSpider, settings)
    scheduler = build_from_crawler(cls or Scheduler, crawler)
    if reactor is not None:
        scheduler.reactor = reactor
    spider = crawler.spidercls.from_crawler(crawler)
    crawler.spider = spider
    scheduler.open(spider)
    return scheduler


def record_dropped(scheduler: Any) -> list[Any]:
    """The requests reported with the request_dropped signal, as they come."""
    from scrapy import signals

    dropped: list[Any] = []

    def handler(request: Any, spider: object) -> None:
        dropped.append(request)

    scheduler.crawler.signals.connect(handler, signal=signals.request_dropped, weak=False)
    return dropped


def results_of_processes(target: Callable[..., None], args_list: list[tuple]) -> list[Any]:
    """Run ``target(*args, results)`` in one spawned process per ``args``; what each put
    in ``results`` (one value per process, in the order they finished)."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    processes = [ctx.Process(target=target, args=(*args, results)) for args in args_list]
    for process in processes:
        process.start()
    values = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(30)
    return values


def leased_entries(server: Any, base_key: str = "demo:requests") -> int:
    """How many entries the lease records of ``<base_key>:leases`` still hold (a record
    holds the entries of one pop; a released entry is ``False``)."""
    import msgpack

    records = server.hvals(f"{base_key}:leases")
    return sum(
        sum(1 for entry in msgpack.unpackb(record, raw=True)[4:] if entry is not False)
        for record in records
    )


class ManualClock:
    """A monotonic clock that tests move forward (``clock()`` in seconds)."""

    def __init__(self, start: float | None = None) -> None:
        import time

        self.now = time.monotonic() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def guard_clock(scheduler: Any) -> ManualClock:
    """Put the outage guard of ``scheduler``'s crawler on a clock the test moves (to skip
    a back-off: ``clock.advance(OutageGuard.MAX_BACKOFF)``)."""
    from scrapy_redis.store.outage import outage_guard

    clock = ManualClock()
    outage_guard(scheduler.crawler).clock = clock
    return clock


def stand_in_engine(scheduler: Any, wake: Any = None) -> set[Any]:
    """Give ``scheduler``'s crawler a stand-in engine; returns its set of requests in
    progress (what leases are acknowledged against). ``wake()`` runs when the
    scheduler wakes the engine (its ``nextcall.schedule()``)."""
    from types import SimpleNamespace

    nextcall = SimpleNamespace(schedule=wake) if wake is not None else None
    slot = SimpleNamespace(inprogress=set(), closing=None, nextcall=nextcall)
    scheduler.crawler.engine = SimpleNamespace(_slot=slot, running=True)
    return slot.inprogress


def use_every_component(settings: dict[str, Any], server: Any) -> None:
    """Run the scheduler (enqueue, dedup, dequeue), the standalone dupefilter, the items
    pipeline and the stats collector of a crawler with ``settings``; check what they
    wrote through ``server``, a client of the same Redis made by the test."""
    from scrapy import Request

    from scrapy_redis.dupefilter import RFPDupeFilter
    from scrapy_redis.pipelines import RedisPipeline

    settings = {
        **settings,
        "SCHEDULER_PERSIST": True,
        "STATS_CLASS": "scrapy_redis.stats.RedisStatsCollector",
    }
    scheduler = open_scheduler(settings)
    crawler = scheduler.crawler
    assert scheduler.enqueue_request(Request("http://example.com/a")) is True
    scheduler.enqueue_request(Request("http://example.com/a"))  # a duplicate
    assert scheduler.next_request().url == "http://example.com/a"
    assert scheduler.next_request() is None
    RedisPipeline.from_crawler(crawler).process_item({"n": 1})
    crawler.stats.inc_value("pages", 2)
    dupefilter = RFPDupeFilter.from_crawler(get_crawler(DemoSpider, settings))
    assert dupefilter.request_seen(Request("http://example.com/b")) is False
    assert dupefilter.request_seen(Request("http://example.com/b")) is True
    scheduler.close("finished")
    crawler.stats.close_spider(reason="finished")
    dupefilter.close("finished")
    assert server.llen("demo:items") == 1
    assert server.scard("demo:dupefilter") == 1
    assert int(server.hget("demo:stats", "pages")) == 2


def dying_worker(schedulers: Any, settings: dict[str, Any], count: int = 3) -> Any:
    """A worker (``schedulers`` fixture) that enqueued ``count`` requests and leased them
    all with one pop: then it dies (it is never closed: expire_leases() makes its leases
    expire, or give it a short SCHEDULER_WORKER_TIMEOUT)."""
    from scrapy import Request

    dead = schedulers(settings)
    for n in range(count):
        dead.enqueue_request(Request(f"http://example.com/{n}"))
    assert dead.next_request() is not None
    return dead


def expire_leases(server: Any) -> int:
    """Put every lease in the (test) database past its deadline, as SCHEDULER_WORKER_TIMEOUT
    seconds without a renewal would: the workers holding them are dead. Returns how many.

    Rather than a short timeout and a sleep: under load a worker the test keeps alive
    could miss its own deadline (a worker opened 0.3 s after another died, recovering
    its leases too early), and a sleep costs its length in every run."""
    expired = 0
    for key in server.scan_iter(match="*lease_deadlines", count=1000):
        ids = server.zrange(key, 0, -1)
        if ids:
            expired += server.zadd(key, dict.fromkeys(ids, 0), xx=True, ch=True)
    return expired


def expire_workers(server: Any) -> int:
    """Put every worker registered in the (test) database past its deadline, as
    SCHEDULER_WORKER_TIMEOUT seconds without a heartbeat would (see expire_leases()).
    Returns how many."""
    seconds, micros = server.time()
    past = seconds * 1000 + micros // 1000 - 1
    expired = 0
    for key in server.scan_iter(match="*:workers", count=1000, _type="hash"):
        workers = [w for w in server.hkeys(key) if w != b"~flushing"]
        if workers:
            server.hset(key, mapping=dict.fromkeys(workers, past))
            expired += len(workers)
    return expired


def until_stored(returned: Any) -> Any:
    """What Scrapy does with RedisPipeline.process_item()'s answer: a Deferred of the item
    it gives back (at once, or once the item's batch is stored)."""
    from collections.abc import Coroutine

    from twisted.internet.defer import Deferred, succeed

    if isinstance(returned, Coroutine):
        return Deferred.fromCoroutine(returned)
    return succeed(returned)


#: The example project the end-to-end tests run workers and commands in.
EXAMPLE = Path(__file__).resolve().parents[1] / "example-project"


def scrapy_redis(redis_url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``scrapy redis ARGS`` in example-project, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "redis", *args],
        cwd=EXAMPLE,
        env={**os.environ, "REDIS_URL": redis_url},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def wait_until(condition: Callable[[], Any], what: str, workers: Any, timeout: float = 60) -> None:
    """Poll ``condition()`` until true: fails if a worker of ``workers`` (test_e2e's
    ``start_worker()``) exited meanwhile, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert all(w.process.poll() is None for w in workers), f"a worker exited while {what}"
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.02)


class LocalSite:
    """A site on 127.0.0.1 (a thread): every GET is counted by :meth:`hit` (with the
    lock held), then answered 200 with :meth:`page` (HTML). ``url``: its address."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self._lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with site._lock:
                    site.hit(self.path)
                body = site.page(self.path).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def hit(self, path: str) -> None:
        """Count a fetch of ``path`` (the lock held)."""

    def page(self, path: str) -> str:
        raise NotImplementedError

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
