"""What pushing a batch costs the worker: one push, or a push per lane in threads.

Starts a 6-node cluster behind a proxy per node (as cluster_latency.py does), opens
two schedulers on it, one unsplit and one of 3 lanes (``SCHEDULER_SHARDS``), and
times ``send_enqueued()`` of batches of ``--batch`` new requests in each, in turn,
``--batches`` times, without and with ``--delay-ms`` each way. Prints the median and
the 90th percentile per scheduler and delay. Usage::

    .venv/bin/python benchmarks/lane_push_cost.py [--batches 150] [--batch 12]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _util import HERE
from cluster_latency import proxied_cluster
from scrapy import Request

sys.path.insert(0, str(HERE.parent / "tests"))
from helpers import open_scheduler  # the tests' way of opening a scheduler


def settings(url: str, shards: int) -> dict[str, Any]:
    return {
        "REDIS_URL": url,
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.PriorityQueue",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        "SCHEDULER_SHARDS": shards,
        "SCHEDULER_PERSIST": True,
        "SCHEDULER_QUEUE_KEY": f"lanes{shards}:requests",
        "SCHEDULER_DUPEFILTER_KEY": f"lanes{shards}:dupefilter",
    }


def time_pushes(url: str, batches: int, batch: int, tag: str) -> dict[int, list[float]]:
    """Seconds per ``send_enqueued()`` of each scheduler (by lane count)."""
    schedulers = {shards: open_scheduler(settings(url, shards)) for shards in (1, 3)}
    times: dict[int, list[float]] = {1: [], 3: []}
    try:
        for n in range(batches):
            for shards, scheduler in schedulers.items():
                for i in range(batch):
                    scheduler.enqueue_request(Request(f"http://example.com/{tag}/{n}/{i}"))
                started = time.perf_counter()
                scheduler.send_enqueued()
                times[shards].append(time.perf_counter() - started)
    finally:
        for scheduler in schedulers.values():
            scheduler.stop_timers()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=150)
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--delay-ms", type=float, default=0.5, help="each way")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, proxied_cluster(Path(tmp)) as cluster:
        _, proxies, url = cluster
        for delay in (0.0, args.delay_ms):
            proxies.start(delay)
            time.sleep(0.3)
            times = time_pushes(url, args.batches, args.batch, f"{delay}")
            proxies.stop()
            for shards, values in times.items():
                values.sort()
                print(
                    f"+{2 * delay:g} ms, {shards} lane(s): median "
                    f"{statistics.median(values) * 1e3:.2f} ms, 90th percentile "
                    f"{values[int(len(values) * 0.9)] * 1e3:.2f} ms a batch of {args.batch}"
                )


if __name__ == "__main__":
    main()
