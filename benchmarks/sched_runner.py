"""Runs the scheduler micro-benchmark (sched_bench.py), one subprocess per measurement.

* scheduler_benchmark: ours and the original, each queue class, each run (the
  order of the packages alternates from run to run);
* lease_scheduler_benchmark: ours with and without leases, interleaved in one
  process per queue class and run (``sched_bench.py --paired``).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from _util import HERE, Redis, log
from packages import OURS_VARIANTS, Packages

QUEUES = ("FifoQueue", "LifoQueue", "PriorityQueue")
#: Seconds one benchmark process (or one crawl) may take.
WORKER_TIMEOUT = 600.0

#: {package: {queue: [sched_bench.py's JSON of each run]}}
Results = dict[str, dict[str, list[dict[str, Any]]]]


def sched_run(
    packages: Packages, package: str, redis: Redis, queue: str, n: int, extra: list[str]
) -> dict[str, Any]:
    """One sched_bench.py process; its JSON, checked."""
    script = str(HERE / "sched_bench.py")
    args = ["--redis-url", redis.url, "--queue", queue, "--n", str(n), *extra]
    proc = subprocess.run(
        [packages.python(package), script, *args],
        capture_output=True,
        text=True,
        env=packages.env(package),
        cwd=HERE,
        timeout=WORKER_TIMEOUT,
    )
    if proc.returncode != 0:
        raise SystemExit(f"sched_bench failed ({package} {queue}):\n{proc.stderr}")
    data: dict[str, Any] = json.loads(proc.stdout)
    expected = packages.expected_module(package)
    if expected and expected not in data["module"]:
        raise SystemExit(f"{package} imported the wrong package: {data['module']}")
    if not data["ok"]:
        log(f"WARNING: {package} {queue} failed its checks: {data['checks']}")
    return data


def scheduler_benchmark(packages: Packages, redis: Redis, n: int, runs: int) -> Results:
    """Ours against the original, every queue class, ``runs`` times."""
    results: Results = {pkg: {q: [] for q in QUEUES} for pkg in ("ours", "original")}
    for run in range(runs):
        order = ("ours", "original") if run % 2 == 0 else ("original", "ours")
        for queue in QUEUES:
            for package in order:
                log(f"scheduler run {run + 1}/{runs}: {package} {queue} n={n}")
                data = sched_run(packages, package, redis, queue, n, [])
                results[package][queue].append(data)
    return results


def lease_scheduler_benchmark(packages: Packages, redis: Redis, n: int, runs: int) -> Results:
    """Ours with and without leases, interleaved in one process (sched_bench.py --paired):
    enqueue, then dequeue half acking each request, half not acking."""
    results: Results = {v: {q: [] for q in QUEUES} for v in OURS_VARIANTS}
    for run in range(runs):
        for queue in QUEUES:
            log(f"lease scheduler run {run + 1}/{runs}: {queue}, with and without leases, n={n}")
            data = sched_run(packages, "ours", redis, queue, n, ["--paired"])
            for variant in OURS_VARIANTS:
                got = data["variants"][variant]
                if got["uses_leases"] != (variant == "ours"):
                    raise SystemExit(
                        f"{variant} {queue}: uses_leases = {got['uses_leases']} "
                        f"({got['queue_class']})"
                    )
                results[variant][queue].append(got)
    return results
