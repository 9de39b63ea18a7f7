"""What showing the requests due later and the fingerprints expiring costs ``scrapy redis
status`` (issue 27.5: cheap at any size): the time of its reads (scrapy_redis.fleet.later)
and the Redis commands they send, against the size of the keys.

A fresh redis-server is filled, for each size N given, with N fingerprints that expire in
RFPDupeFilter's sorted set and N / 10 requests due later, then with N fingerprints in a
LeanDupeFilter's generations (capacity N); each read is timed (median of 20). Usage::

    .venv/bin/python benchmarks/later_status.py 1e4 1e5 1e6
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import msgpack
import redis
from _util import Redis

from scrapy_redis.core.lifetime import Expiry
from scrapy_redis.dupefilter import LeanDupeFilter
from scrapy_redis.fleet.later import due_later, expiring
from scrapy_redis.store.redis_values import Reader

CHUNK = 10_000
READS = 20


def _timed(client: Any, read: Callable[[], Any]) -> tuple[float, int]:
    """The median time of ``read()`` in ms, and the commands it sends to Redis."""
    times = []
    for _ in range(READS):
        started = time.perf_counter()
        read()
        times.append((time.perf_counter() - started) * 1000)
    before = int(client.info("stats")["total_commands_processed"])
    read()
    sent = int(client.info("stats")["total_commands_processed"]) - before - 1  # (INFO)
    return statistics.median(times), sent


def _fill_sorted_set(client: Any, count: int, now_ms: int) -> None:
    rnd = random.Random(count)
    for start in range(0, count, CHUNK):
        size = min(CHUNK, count - start)
        members = {
            f"{rnd.getrandbits(160):040x}": now_ms + rnd.randrange(7_200_000) for _ in range(size)
        }
        client.zadd("bench:dupefilter", members)
    due = {
        msgpack.packb([0, n, b"x" * 200]): now_ms + rnd.randrange(86_400_000)
        for n in range(count // 10)
    }
    for start in range(0, len(due), CHUNK):
        client.zadd("bench:requests:due", dict(list(due.items())[start : start + CHUNK]))


def _fill_lean(client: Any, count: int) -> None:
    df = LeanDupeFilter(client, "bench:lean", capacity=count, expiry=Expiry(7_200_000))
    rnd = random.Random(count)
    for start in range(0, count, 5000):
        batch = [f"{rnd.getrandbits(160):040x}" for _ in range(min(5000, count - start))]
        df.seen_expiring(batch, [7_200_000] * len(batch))


def measure(server: Redis, count: int) -> str:
    server.flush()
    client = redis.Redis(port=server.port)
    seconds, micros = client.time()
    now = seconds + micros / 1e6
    _fill_sorted_set(client, count, int(now * 1000))
    _fill_lean(client, count)
    reader = Reader(client, [])
    due_ms, due_sent = _timed(client, lambda: due_later(reader, ["bench:requests"], False, now))
    set_ms, set_sent = _timed(client, lambda: expiring(reader, ["bench:dupefilter"], False, now))
    lean_ms, lean_sent = _timed(client, lambda: expiring(reader, ["bench:lean"], False, now))
    return (
        f"N = {count:.0e}: due later ({count // 10:,}) {due_ms:.2f} ms, {due_sent} commands; "
        f"sorted set ({count:,}) {set_ms:.2f} ms, {set_sent} commands; "
        f"lean generations ({count:,}) {lean_ms:.2f} ms, {lean_sent} commands"
    )


def main(args: list[str]) -> None:
    server = Redis()
    try:
        for size in args or ["1e4", "1e5", "1e6"]:
            print(measure(server, int(float(size))), flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
