"""Duplicate filters side by side, in one run: Redis bytes per URL, insert rates, errors.

Variants (data: VARIANTS): the original's RFPDupeFilter (scrapy-redis 0.9.1, its
virtualenv), scrapy-redis-bloomfilter 0.8.1 (pip --no-deps into a folder beside it,
sized for ``n`` at 0.1 %), and ours: RFPDupeFilter, LeanDupeFilter and BloomDupeFilter
(sized for ``n``, 0.1 %), through ``request_seen()`` and through the batched path the
scheduler uses. Each measurement is one dedup_bench.py process on a flushed
redis-server. Usage::

    .venv/bin/python benchmarks/dedup_run.py [--n 1000000] [--seen-n 100000] [--runs 3]
        [--only NAME] [--path seen|batch] [--output dedup]

Writes results/<output>.md and .json; no timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _util import HERE, RESULTS, Redis, log
from original_venv import clean_env, original_python

FORK = "scrapy-redis-bloomfilter==0.8.1"
FORK_DIR = HERE / ".fork-bloomfilter"
ERROR_RATE = 0.001


@dataclass(frozen=True)
class Variant:
    name: str
    package: str  # ours | original | fork
    filter: str
    path: str  # seen | batch
    settings: Callable[[int], dict[str, Any]]


def _none(n: int) -> dict[str, Any]:
    return {}


def _lean(n: int) -> dict[str, Any]:
    return {"DUPEFILTER_LEAN_CAPACITY": n}


def _bloom(n: int) -> dict[str, Any]:
    return {"BLOOMFILTER_CAPACITY": n, "BLOOMFILTER_ERROR_RATE": ERROR_RATE}


def _fork(n: int) -> dict[str, Any]:
    bits = n * -math.log(ERROR_RATE) / math.log(2) ** 2
    return {"BLOOMFILTER_BIT": math.ceil(math.log2(bits)), "BLOOMFILTER_HASH_NUMBER": 10}


OURS = "scrapy_redis.dupefilter."
VARIANTS = [
    Variant("original RFPDupeFilter", "original", OURS + "RFPDupeFilter", "seen", _none),
    Variant(
        "scrapy-redis-bloomfilter",
        "fork",
        "scrapy_redis_bloomfilter.dupefilter.RFPDupeFilter",
        "seen",
        _fork,
    ),
    Variant("ours RFPDupeFilter", "ours", OURS + "RFPDupeFilter", "seen", _none),
    Variant("ours RFPDupeFilter", "ours", OURS + "RFPDupeFilter", "batch", _none),
    Variant("ours LeanDupeFilter", "ours", OURS + "LeanDupeFilter", "seen", _lean),
    Variant("ours LeanDupeFilter", "ours", OURS + "LeanDupeFilter", "batch", _lean),
    Variant("ours BloomDupeFilter", "ours", OURS + "BloomDupeFilter", "seen", _bloom),
    Variant("ours BloomDupeFilter", "ours", OURS + "BloomDupeFilter", "batch", _bloom),
]


def fork_dir(python: Path) -> Path:
    """scrapy-redis-bloomfilter, installed once with the original venv's pip (no deps)."""
    if not (FORK_DIR / "scrapy_redis_bloomfilter").exists():
        log(f"installing {FORK} into {FORK_DIR} (one-time)")
        pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--target", str(FORK_DIR)]
        subprocess.run([*pip, FORK], check=True, env=clean_env())
    return FORK_DIR


def command(variant: Variant, n: int, probe: int, url: str) -> tuple[list[str], dict[str, str]]:
    env = clean_env()
    python = sys.executable
    if variant.package == "ours":
        env["PYTHONPATH"] = str(HERE.parent / "src")
    else:
        python = str(original_python())
        if variant.package == "fork":
            env["PYTHONPATH"] = str(fork_dir(Path(python)))
    args = [python, str(HERE / "dedup_bench.py"), "--redis-url", url, "--filter", variant.filter]
    args += ["--path", variant.path, "--n", str(n), "--probe", str(probe)]
    for name, value in variant.settings(n).items():
        args += ["--set", f"{name}={value}"]
    return args, env


def run_one(variant: Variant, n: int, probe: int, redis: Redis) -> dict[str, Any] | None:
    args, env = command(variant, n, probe, redis.url)
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    if done.returncode:
        log(f"{variant.name} ({variant.path}) failed: {done.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def spread(values: list[float], fmt: str) -> str:
    if not values:
        return "–"
    cells = [format(statistics.median(values), fmt), format(min(values), fmt)]
    return f"{cells[0]} ({cells[1]}–{format(max(values), fmt)})"


def _columns(runs: list[dict[str, Any]]) -> Callable[[str], list[float]]:
    return lambda key: [float(run[key]) for run in runs]


def _columns(runs: list[dict[str, Any]]) -> Callable[[str], list[float]]:
    return lambda key: [float(run[key]) for run in runs]


def table(results: dict[tuple[str, str, int], list[dict[str, Any]]]) -> list[str]:
    lines = [
        "| filter | path | n | inserts/s | client CPU µs/URL | Redis bytes/URL | false positives |",
        "|---|---|---|---|---|---|---|",
    ]
    for (name, path, n), runs in results.items():
        column = _columns(runs)
        lines.append(
            f"| {name} | {path} | {n:,} | {spread(column('rate'), ',.0f')} | "
            f"{spread(column('cpu_us'), '.1f')} | {spread(column('bytes_per_url'), '.2f')} | "
            f"{spread([100 * v for v in column('false_positive_rate')], '.3f')} % |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="URLs, batched path")
    parser.add_argument("--seen-n", type=int, default=100_000, help="URLs, request_seen()")
    parser.add_argument("--probe", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="", help="variants whose name contains this")
    parser.add_argument("--path", choices=["seen", "batch"], help="variants of this path only")
    parser.add_argument("--output", default="dedup", help="results/<output>.md and .json")
    args = parser.parse_args()
    results: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    redis = Redis()
    try:
        for _ in range(args.runs):
            for variant in VARIANTS:
                if args.only not in variant.name or args.path not in (None, variant.path):
                    continue
                n = args.n if variant.path == "batch" else args.seen_n
                log(f"{variant.name} ({variant.path}), n = {n:,}")
                result = run_one(variant, n, args.probe, redis)
                if result is not None:
                    results.setdefault((variant.name, variant.path, n), []).append(result)
    finally:
        redis.stop()
    report = ["# Duplicate filters side by side", "", *table(results), ""]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.output}.md").write_text("\n".join(report))
    (RESULTS / f"{args.output}.json").write_text(
        json.dumps({str(k): v for k, v in results.items()})
    )
    print("\n".join(report))


if __name__ == "__main__":
    main()
