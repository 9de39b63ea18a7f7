"""Evicting the oldest of a bounded set: a dict used as a queue, an OrderedDict, a deque + set.

    python benchmarks/seen_cache_bench.py             # ~1 min
    python benchmarks/seen_cache_bench.py --size 100000 --inserts 1200000

What the scheduler's seen cache (enqueue.SeenCache) does on every enqueue: add a
fingerprint, evict the oldest once ``--size`` are kept. Prints the CPU per insert
(thread time) after 200,000 inserts and after ``--inserts``: the dict's eviction
(``del d[next(iter(d))]``) scans every slot deleted before its first live entry,
so its cost grows with the inserts; the other two stay flat. Nothing asserted.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import OrderedDict, deque
from collections.abc import Callable


def as_dict(data: list[str], size: int) -> None:
    known: dict[str, None] = {}
    for fingerprint in data:
        known[fingerprint] = None
        while len(known) > size:
            del known[next(iter(known))]


def as_ordered_dict(data: list[str], size: int) -> None:
    known: OrderedDict[str, None] = OrderedDict()
    for fingerprint in data:
        known[fingerprint] = None
        while len(known) > size:
            known.popitem(last=False)


def as_deque_and_set(data: list[str], size: int) -> None:
    known: set[str] = set()
    order: deque[str] = deque()
    for fingerprint in data:
        if fingerprint not in known:
            known.add(fingerprint)
            order.append(fingerprint)
        while len(order) > size:
            known.discard(order.popleft())


def per_insert_us(func: Callable[[list[str], int], None], data: list[str], size: int) -> float:
    start = time.thread_time()
    func(data, size)
    return (time.thread_time() - start) / len(data) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--inserts", type=int, default=1_200_000)
    args = parser.parse_args()
    data = [os.urandom(20).hex() for _ in range(args.inserts)]
    short = data[:200_000]
    for name, func in (
        ("deque + set", as_deque_and_set),
        ("OrderedDict", as_ordered_dict),
        ("dict", as_dict),
    ):
        first, last = per_insert_us(func, short, args.size), per_insert_us(func, data, args.size)
        print(
            f"{name:12} {first:6.2f} µs/insert over {len(short):,}, {last:6.2f} over {len(data):,}"
        )


if __name__ == "__main__":
    main()
