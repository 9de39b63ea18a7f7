"""Redis bytes per URL of BloomDupeFilter (``INFO memory`` delta / n) and its false-positive
rate, sized up front and grown past its capacity (issue #14).

Random fingerprints are recorded through ``seen_many()`` (10^4 per call, sent as the
filter's own script batches) on a flushed redis-server; the memory is read before the first
call and after the last, then ``--probe`` unseen fingerprints measure the false-positive
rate (they are recorded too: the filter is that much fuller when the probe ends). The server
has run the filter's scripts once before (then FLUSHALL): its first Lua call costs it some
0.3 MB once, whatever the filters (the script cache, the Lua client), not a cost per URL. Points are
``capacity:count``; without any, the three of issue #14: sized (10^6:10^6), grown 8 times
(125000:10^6) and the worst point near 8 times (just after the layer that follows the one
holding 8 times the capacity is added: ``worst`` stands for that count). Usage::

    .venv/bin/python benchmarks/bloom_memory.py --runs 3
    .venv/bin/python benchmarks/bloom_memory.py --error-rate 0.01 1e5:1e5 125000:worst
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
from dataclasses import dataclass

import redis
from _util import Redis

from scrapy_redis.dupefilter import BloomDupeFilter
from scrapy_redis.dupefilters.bloom_layout import BloomLayout
from scrapy_redis.store.keys import bloom_block_key

CHUNK = 10**4
#: Fingerprints recorded past the point where a layer is added: every block of it written.
PAST_GROWTH = 2000


@dataclass(frozen=True)
class Sample:
    layers: int
    bytes_per_url: float
    blocks_per_url: float
    false_positive_rate: float


def worst_near(layout: BloomLayout, times: int) -> int:
    """The count just after the layer following the one that holds ``times`` x the
    capacity is added (plus :data:`PAST_GROWTH`): the newest layer is then nearly empty."""
    held, index = 0, 0
    while held < times * layout.capacity:
        held += layout.layer(index).capacity
        index += 1
    return held + PAST_GROWTH


def fingerprints(rnd: random.Random, count: int) -> list[str]:
    return [f"{rnd.getrandbits(160):040x}" for _ in range(count)]


def record(df: BloomDupeFilter, rnd: random.Random, count: int) -> int:
    """Record ``count`` random fingerprints; how many were reported seen."""
    seen = 0
    for start in range(0, count, CHUNK):
        seen += sum(df.seen_many(fingerprints(rnd, min(CHUNK, count - start))))
    return seen


def block_bytes(client: redis.Redis, df: BloomDupeFilter) -> int:
    """``MEMORY USAGE`` of every block of every layer (the bits alone, without the server's
    fixed costs)."""
    pipe = client.pipeline(transaction=False)
    for index, layer in enumerate(df.layers):
        for block in range(layer.blocks):
            pipe.memory_usage(bloom_block_key(df.key, df.generation, index, block), samples=0)
    return sum(size or 0 for size in pipe.execute())


def warm_up(server: Redis) -> None:
    """Run the filter's scripts once (opening, recording, growing), then flush the data."""
    client = redis.Redis(port=server.port)
    df = BloomDupeFilter(client, "bench:warm-up", layout=BloomLayout(1000, 0.01), temporary=False)
    record(df, random.Random(-1), 3000)
    client.close()
    server.flush()


def measure(server: Redis, layout: BloomLayout, count: int, probe: int, seed: int) -> Sample:
    server.flush()
    client = redis.Redis(port=server.port)
    client.ping()
    df = BloomDupeFilter(client, "bench:dupefilter", layout=layout, temporary=False)
    rnd = random.Random(seed)
    before = server.info("memory")["used_memory"]
    record(df, rnd, count)
    grown = server.info("memory")["used_memory"] - before
    blocks = block_bytes(client, df)
    layers = len(df.layers)
    false_positives = record(df, rnd, probe)
    client.close()
    return Sample(layers, grown / count, blocks / count, false_positives / probe)


def spread(values: list[float], unit: str, digits: int) -> str:
    """median (min–max)."""
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f}{unit} ({low:.{digits}f}–{high:.{digits}f})"


def report(layout: BloomLayout, count: int, samples: list[Sample]) -> str:
    return (
        f"capacity {layout.capacity:,}, {count:,} URLs ({count / layout.capacity:.2f}x), "
        f"error rate {layout.error_rate:g}, {samples[0].layers} layers: "
        f"{spread([s.bytes_per_url for s in samples], ' B/URL', 3)}, "
        f"blocks alone {spread([s.blocks_per_url for s in samples], ' B/URL', 3)}, "
        f"false positives {spread([100 * s.false_positive_rate for s in samples], ' %', 4)}"
    )


def point(arg: str, error_rate: float) -> tuple[BloomLayout, int]:
    capacity, count = arg.split(":")
    layout = BloomLayout(int(float(capacity)), error_rate)
    return layout, worst_near(layout, 8) if count == "worst" else int(float(count))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("points", nargs="*", default=["1e6:1e6", "125000:1e6", "125000:worst"])
    parser.add_argument("--error-rate", type=float, default=0.001)
    parser.add_argument("--probe", type=float, default=1e5)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # "past its capacity": expected here
    server = Redis()
    try:
        warm_up(server)
        for arg in args.points:
            layout, count = point(arg, args.error_rate)
            samples = [
                measure(server, layout, count, int(args.probe), seed) for seed in range(args.runs)
            ]
            print(report(layout, count, samples), flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
