"""Ours with and without redis-py's C parser (the ``hiredis`` extra), side by side.

    python benchmarks/hiredis_ab.py            # 6 rounds, ~1 min on 2 cores
    python benchmarks/hiredis_ab.py --rounds 10

Runs the scheduler micro-benchmark (sched_bench.py) of our package, FifoQueue and
PriorityQueue, with this interpreter (no hiredis) and with the one of
benchmarks/.venv-hiredis (``--system-site-packages`` + ``pip install hiredis``,
created on first use), in alternating order round after round, and prints the
client CPU per request of each phase: median (min–max) and the ratio of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import HERE, ROOT, Redis, summary

VENV = HERE / ".venv-hiredis"
QUEUES = ("FifoQueue", "PriorityQueue")
PHASES = ("enqueue_cpu_us", "dequeue_cpu_us", "dup_enqueue_cpu_us")
HAS_HIREDIS = "from redis.utils import HIREDIS_AVAILABLE as h; print(h)"


def interpreters() -> dict[str, str]:
    """Without and with hiredis; fails when either is not what its name says."""
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run(
            [sys.executable, "-m", "venv", "--system-site-packages", str(VENV)], check=True
        )
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "hiredis",
            ],
            check=True,
        )
    found = {}
    for name, interpreter in (("without", sys.executable), ("with", str(python))):
        answer = subprocess.run(
            [interpreter, "-c", HAS_HIREDIS], capture_output=True, text=True, check=True
        ).stdout.strip()
        if answer != str(name == "with"):
            raise SystemExit(f"{interpreter}: HIREDIS_AVAILABLE is {answer}")
        found[name] = interpreter
    return found


#: {"without" | "with": {queue: [sched_bench.py's JSON of each round]}}
Results = dict[str, dict[str, list[dict[str, float]]]]


def measure(pythons: dict[str, str], rounds: int, n: int) -> Results:
    """sched_bench.py with each interpreter and queue class, ``rounds`` times, the order
    of the interpreters alternating from round to round."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONHASHSEED": "0"}
    results: Results = {name: {queue: [] for queue in QUEUES} for name in pythons}
    redis = Redis()
    try:
        for round_ in range(rounds):
            names = list(pythons) if round_ % 2 == 0 else list(reversed(pythons))
            for name in names:
                for queue in QUEUES:
                    redis.flush()
                    args = ["--redis-url", redis.url, "--queue", queue, "--n", str(n)]
                    out = subprocess.run(
                        [pythons[name], str(HERE / "sched_bench.py"), *args],
                        capture_output=True,
                        text=True,
                        env=env,
                        cwd=HERE,
                        check=True,
                    )
                    results[name][queue].append(json.loads(out.stdout))
            print(f"round {round_ + 1} of {rounds} done", file=sys.stderr)
    finally:
        redis.stop()
    return results


def show(results: Results, rounds: int) -> None:
    """Client CPU per request of each phase: median (min–max), with / without."""
    print(f"Client CPU µs per request, median (min–max) of {rounds} rounds:")
    for queue in QUEUES:
        for phase in PHASES:
            without = summary([r[phase] for r in results["without"][queue]])
            with_ = summary([r[phase] for r in results["with"][queue]])
            print(
                f"  {queue} {phase}: without {without['median']:.1f} "
                f"({without['min']:.1f}–{without['max']:.1f}), with hiredis "
                f"{with_['median']:.1f} ({with_['min']:.1f}–{with_['max']:.1f}), "
                f"with / without {with_['median'] / without['median']:.2f}×"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--n", type=int, default=10_000, help="requests per phase")
    args = parser.parse_args()
    show(measure(interpreters(), args.rounds, args.n), args.rounds)


if __name__ == "__main__":
    main()
