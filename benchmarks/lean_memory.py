"""Redis bytes per request of LeanDupeFilter (``INFO memory`` delta / n), and the
encodings of its buckets, for capacities and request counts given on the command line;
``--lifetime SECONDS`` records them as fingerprints that expire (DUPEFILTER_LIFETIME: the
generations' buckets, see lean_expiry.py) instead.

Random fingerprints are recorded through ``record_fingerprints()`` (the same buckets
and members as ``request_seen()``) on a fresh redis-server, once the scripts have run a
few batches on another filter (what the server keeps for running scripts is not charged
to the fingerprints). Usage::

    .venv/bin/python benchmarks/lean_memory.py 1e6:1e6 1e7:1e6 1e6:1e5 1e7:1e7
    .venv/bin/python benchmarks/lean_memory.py --lifetime 3600 1e6:1e6
    .venv/bin/python benchmarks/lean_memory.py --steady 60 1e6:1e6

``--steady L`` records ``count`` new fingerprints per ``L`` seconds, evenly, for
``3 L`` seconds, with lifetime ``L``: a crawl in its steady state, whose fingerprints
spread over the live generations; Redis's bytes per *live* URL (one recorded within the
last ``L`` seconds), sampled through the steady state. A fair comparison with the filter
without a lifetime holds as many live URLs as the capacity (``count`` = ``capacity``), and
keeps the rate (the line says how late it ended: choose ``L`` so that it is not).
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections import Counter
from typing import Any

import redis
from _util import Redis

from scrapy_redis.core.lifetime import Expiry
from scrapy_redis.dupefilter import LeanDupeFilter
from scrapy_redis.dupefilters.lean_expiry import GENERATIONS

CHUNK = 10**6


def warmed_up(server: Redis, client: Any, expiry: Expiry | None, batch: int) -> int:
    """``used_memory`` once the scripts have run a few batches of ``batch`` on another
    filter, deleted since: what the server keeps for running them (its script client's
    buffers, ~0.3 MB) is not charged to the fingerprints measured."""
    warm = LeanDupeFilter(client, "warm:dupefilter", capacity=10**6, expiry=expiry)
    rnd = random.Random(7)
    for _ in range(3):
        fingerprints = [f"{rnd.getrandbits(160):040x}" for _ in range(batch)]
        if expiry is None:
            warm.record_fingerprints(fingerprints)
        else:
            warm.seen_expiring(fingerprints, [expiry.default_ms] * batch)
    warm.clear()
    return int(server.info("memory")["used_memory"])


def measure(server: Redis, capacity: int, count: int, lifetime: float = 0) -> str:
    server.flush()
    client = redis.Redis(port=server.port)
    expiry = Expiry(int(lifetime * 1000)) if lifetime else None
    df = LeanDupeFilter(client, "bench:dupefilter", capacity=capacity, expiry=expiry)
    df.batch_size = 5000
    rnd = random.Random(capacity * 31 + count)
    before = warmed_up(server, client, expiry, df.batch_size)
    for start in range(0, count, CHUNK):
        size = min(CHUNK, count - start)
        fingerprints = [f"{rnd.getrandbits(160):040x}" for _ in range(size)]
        if expiry is None:
            df.record_fingerprints(fingerprints)
        for at in range(0, len(fingerprints) if expiry else 0, df.batch_size):
            batch = fingerprints[at : at + df.batch_size]
            df.seen_expiring(batch, [expiry.default_ms] * len(batch))  # type: ignore[union-attr]
    per_request = (server.info("memory")["used_memory"] - before) / count
    pipe = client.pipeline(transaction=False)
    keys = client.scan_iter(match="bench:dupefilter:lean:*", count=10000)
    for key in keys:
        pipe.object("encoding", key)
    encodings = Counter(e.decode() for e in pipe.execute() if e is not None)
    return (
        f"capacity {capacity:.0e}, {count:.0e} requests, lifetime {lifetime or 'forever'}, "
        f"{df.layout.buckets} buckets "
        f"({df.layout.bits} bits): {per_request:.2f} B/request, buckets {dict(encodings)}"
    )


def steady(server: Redis, capacity: int, count: int, lifetime: float) -> str:
    """``count`` new fingerprints per ``lifetime`` seconds, evenly, for 3 lifetimes; from
    the end of the first lifetime plus a generation's span (the steady state) on, Redis's
    memory per *live* URL (recorded within the last lifetime: those the filter must
    answer "seen" for), sampled 16 times a span: its mean and its highest."""
    server.flush()
    client = redis.Redis(port=server.port)
    expiry = Expiry(int(lifetime * 1000))
    df = LeanDupeFilter(client, "bench:dupefilter", capacity=capacity, expiry=expiry)
    rnd, batch = random.Random(count), max(1, min(2000, count // 200))
    before = warmed_up(server, client, expiry, batch)
    start, sent_at, samples = time.monotonic(), [], []
    span = lifetime / GENERATIONS
    next_sample = lifetime + span
    for sent in range(0, 3 * count, batch):
        wait = start + sent / count * lifetime - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        fingerprints = [f"{rnd.getrandbits(160):040x}" for _ in range(batch)]
        df.seen_expiring(fingerprints, [expiry.default_ms] * batch)
        now = time.monotonic() - start
        sent_at.append(now)
        if now >= next_sample:
            live = batch * sum(1 for at in sent_at if at > now - lifetime)
            samples.append((server.info("memory")["used_memory"] - before) / live)
            next_sample += span / 16
    late = time.monotonic() - start - 3 * lifetime
    keys = list(client.scan_iter(match="bench:dupefilter:lean:g*", count=10000))
    alive = sum(int(n) for n in _pipelined(client, "scard", keys))
    encodings = Counter(e.decode() for e in _pipelined(client, "object", keys, "encoding"))
    return (
        f"steady, capacity {capacity:.0e}, {count:.0e} new per lifetime {lifetime} s "
        f"({late:+.1f} s late): {statistics.mean(samples):.2f} B per live URL "
        f"(highest {max(samples):.2f}, {len(samples)} samples); at the end {alive} "
        f"recorded in {len(keys)} buckets {dict(encodings)}"
    )


def _pipelined(client: Any, command: str, keys: list[Any], *first: str) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for key in keys:
        getattr(pipe, command)(*first, key)
    return [reply for reply in pipe.execute() if reply is not None]


def main(args: list[str]) -> None:
    lifetime, how = 0.0, measure
    if args[:1] in (["--lifetime"], ["--steady"]):
        how = steady if args[0] == "--steady" else measure
        lifetime, args = float(args[1]), args[2:]
    server = Redis()
    try:
        for arg in args or ["1e6:1e6"]:
            capacity, count = (int(float(part)) for part in arg.split(":"))
            print(how(server, capacity, count, lifetime), flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
