"""A worker's long-run curve: does it get slower the longer it runs, or the deeper the queue?

    nice python benchmarks/long_run.py                 # 10^4 .. 10^6 queued (~3 min, 2 busy cores)
    nice python benchmarks/long_run.py --top 10000000  # up to 10^7 (~40 min; ~3.5 GB of Redis)
    nice python benchmarks/long_run.py --src /tmp/before/src --top 3000000  # another checkout

One redis-server child, one scheduler (``FifoQueue`` by default, ``--queue``) built
as Scrapy's engine builds it (sched_workload.py), in a child interpreter whose
``PYTHONPATH`` starts with ``--src`` (default: this checkout's ``src``). The worker
enqueues new requests until the queue holds each checkpoint (10^4, 3x10^4, 10^5 ...
``--top``); at each one it times a block of ``--block`` new requests enqueued
(``enqueue_request`` + ``send_enqueued``) then as many dequeued (``next_request``,
leases acknowledged as in a crawl), so the queue stays at the checkpoint. The
queue's depth and the number of requests this worker enqueued grow together; the
last rows (``fresh``) are a new scheduler on the same full queue, so that the age of
a worker and the depth of the queue can be told apart. Per row: requests/s (wall),
client CPU us per request (this process), Redis CPU us per request (``INFO``) and
Redis memory per queued request (``used_memory`` over the empty server's, divided by
the requests queued: the queue and the fingerprints). Prints one JSON line per row
on stdout, progress on stderr. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import ROOT, Redis, log

CHECKPOINTS = (10**4, 3 * 10**4, 10**5, 3 * 10**5, 10**6, 3 * 10**6, 10**7)
FILL_CHUNK = 10_000


def _timed_block(func: Any, redis_info: Any) -> dict[str, float]:
    gc.collect()
    redis_cpu = _redis_cpu(redis_info)
    wall, cpu = time.perf_counter(), time.process_time()
    func()
    return {
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
        "redis_cpu": _redis_cpu(redis_info) - redis_cpu,
    }


def _redis_cpu(server: Any) -> float:
    info = server.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


class Worker:
    """One scheduler and the numbering of the requests it is fed (all new)."""

    def __init__(self, url: str, queue: str) -> None:
        from sched_workload import StandInEngine, build

        self.scheduler, self.spider = build(url, queue)
        self.scheduler.crawler.engine = StandInEngine()  # every request handed out is done
        self.server = self.scheduler.server
        self.next_number = 0

    def requests(self, count: int) -> list[Any]:
        from sched_workload import make_request

        first, self.next_number = self.next_number, self.next_number + count
        return [make_request(self.spider, i) for i in range(first, first + count)]

    def enqueue(self, requests: list[Any]) -> None:
        enqueue = self.scheduler.enqueue_request
        for request in requests:
            enqueue(request)
        self.scheduler.send_enqueued()

    def dequeue(self, count: int) -> None:
        pop = self.scheduler.next_request
        for _ in range(count):
            if pop() is None:
                raise RuntimeError("the queue ran dry")


def measure_row(worker: Worker, block: int, label: str, queued: int, base: int) -> dict[str, Any]:
    requests = worker.requests(block)
    enq = _timed_block(lambda: worker.enqueue(requests), worker.server)
    deq = _timed_block(lambda: worker.dequeue(block), worker.server)
    used = int(worker.server.info("memory")["used_memory"])
    return {
        "row": label,
        "queued": queued,
        "enqueued_by_worker": worker.next_number,
        "enqueue_per_s": block / enq["wall"],
        "enqueue_cpu_us": enq["cpu"] / block * 1e6,
        "enqueue_redis_cpu_us": enq["redis_cpu"] / block * 1e6,
        "dequeue_per_s": block / deq["wall"],
        "dequeue_cpu_us": deq["cpu"] / block * 1e6,
        "dequeue_redis_cpu_us": deq["redis_cpu"] / block * 1e6,
        "redis_bytes_per_queued": (used - base) / queued,
        "seen_cache_evicted": getattr(worker.scheduler._parts.seen, "evicted", None),
    }


def run_worker(url: str, queue: str, top: int, block: int) -> None:
    worker = Worker(url, queue)
    base = int(worker.server.info("memory")["used_memory"])
    queued = 0
    for checkpoint in (c for c in CHECKPOINTS if c <= top):
        while queued < checkpoint:
            chunk = min(FILL_CHUNK, checkpoint - queued)
            worker.enqueue(worker.requests(chunk))
            queued += chunk
        print(json.dumps(measure_row(worker, block, "aged", queued, base)), flush=True)
        log(f"queued {queued}")
    fresh = Worker(url, queue)
    fresh.next_number = worker.next_number  # new URLs still
    row = measure_row(fresh, block, "fresh", queued, base)
    row["enqueued_by_worker"] = block
    print(json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--top", type=int, default=10**6, help="deepest queue measured")
    parser.add_argument("--block", type=int, default=10_000, help="requests timed per row")
    parser.add_argument("--queue", default="FifoQueue")
    parser.add_argument("--src", default=str(ROOT / "src"), help="the src/ folder measured")
    parser.add_argument("--worker-url", help=argparse.SUPPRESS)  # the child's own mode
    args = parser.parse_args()
    if args.worker_url:
        run_worker(args.worker_url, args.queue, args.top, args.block)
        return
    redis = Redis()
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([args.src, str(Path(__file__).parent)])}
        command = [sys.executable, __file__, "--worker-url", redis.url, "--top", str(args.top)]
        command += ["--block", str(args.block), "--queue", args.queue]
        log(f"load average at start: {os.getloadavg()}")
        subprocess.run(command, env=env, check=True)
        log(f"load average at end: {os.getloadavg()}")
    finally:
        redis.stop()


if __name__ == "__main__":
    main()
