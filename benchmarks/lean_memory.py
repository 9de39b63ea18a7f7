"""Redis bytes per request of LeanDupeFilter (``INFO memory`` delta / n), and the
encodings of its buckets, for capacities and request counts given on the command line.

Random fingerprints are recorded through ``record_fingerprints()`` (the same buckets
and members as ``request_seen()``) on a fresh redis-server. Usage::

    .venv/bin/python benchmarks/lean_memory.py 1e6:1e6 1e7:1e6 1e6:1e5 1e7:1e7
"""

from __future__ import annotations

import random
import sys
from collections import Counter

import redis
from _util import Redis

from scrapy_redis.dupefilter import LeanDupeFilter

CHUNK = 10**6


def measure(server: Redis, capacity: int, count: int) -> str:
    server.flush()
    client = redis.Redis(port=server.port)
    df = LeanDupeFilter(client, "bench:dupefilter", capacity=capacity)
    df.batch_size = 5000
    rnd = random.Random(capacity * 31 + count)
    before = server.info("memory")["used_memory"]
    for start in range(0, count, CHUNK):
        size = min(CHUNK, count - start)
        df.record_fingerprints([f"{rnd.getrandbits(160):040x}" for _ in range(size)])
    per_request = (server.info("memory")["used_memory"] - before) / count
    pipe = client.pipeline(transaction=False)
    for key in df.layout.bucket_keys(df.key):
        pipe.object("encoding", key)
    encodings = Counter(e.decode() for e in pipe.execute() if e is not None)
    return (
        f"capacity {capacity:.0e}, {count:.0e} requests, {df.layout.buckets} buckets "
        f"({df.layout.bits} bits): {per_request:.2f} B/request, buckets {dict(encodings)}"
    )


def main(args: list[str]) -> None:
    server = Redis()
    try:
        for arg in args or ["1e6:1e6"]:
            capacity, count = (int(float(part)) for part in arg.split(":"))
            print(measure(server, capacity, count), flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
