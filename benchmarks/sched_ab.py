"""Our scheduler against itself: two ``src/`` folders, interleaved, client CPU per request.

For a change that must not slow the scheduler down (a refactor): runs
``sched_bench.py`` (``--skip-dup``) with ``--before`` and ``--after`` on the
same fresh redis-server, alternating, ``--rounds`` times per queue class, and
prints the median client CPU µs per request of enqueue and dequeue (the
wall-clock rates of a shared machine are too noisy for this). Usage::

    git worktree add --detach /tmp/before <commit>
    .venv/bin/python benchmarks/sched_ab.py --before /tmp/before/src --after src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _util import Redis

HERE = Path(__file__).resolve().parent
MEASURES = ("enqueue_cpu_us", "dequeue_cpu_us")


def run_once(src: str, redis: Redis, queue: str, n: int) -> dict[str, float]:
    redis.flush()
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{HERE}"}
    command = [sys.executable, str(HERE / "sched_bench.py"), "--redis-url", redis.url]
    command += ["--queue", queue, "--n", str(n), "--skip-dup"]
    result = json.loads(subprocess.run(command, env=env, capture_output=True, check=True).stdout)
    return {measure: float(result[measure]) for measure in MEASURES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the src/ folder of the reference")
    parser.add_argument("--after", required=True, help="the src/ folder of the change")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--queues", default="PriorityQueue,FifoQueue")
    args = parser.parse_args()
    redis = Redis()
    try:
        for queue in args.queues.split(","):
            samples: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
            for _ in range(args.rounds):
                for side in ("before", "after"):
                    samples[side].append(run_once(getattr(args, side), redis, queue, args.n))
            for measure in MEASURES:
                medians = [statistics.median(s[measure] for s in samples[side]) for side in samples]
                change = medians[1] / medians[0] - 1
                print(
                    f"{queue:14} {measure:15} before {medians[0]:6.2f}  after {medians[1]:6.2f}"
                    f"  ({change:+.1%})"
                )
    finally:
        redis.stop()


if __name__ == "__main__":
    main()
