"""Pool the end-to-end crawls of several benchmark runs into per-round paired ratios.

    python benchmarks/pool.py benchmarks/runs/*.json

On a shared machine how fast a crawl goes drifts by tens of percent from one minute
to the next, and falls alike on both packages crawled minutes apart in the same
round. So each round's crawl of ours is divided by the same round's crawl of the
original (and of Scrapy's in-memory scheduler, the ceiling), and the ratios of all
rounds of all the files given are pooled: median, quartiles, min–max.

Also prints the cores each configuration kept busy (its workers, redis-server and
the site, of the machine's cores): a configuration at one core per worker is
CPU-bound, its pages/s the inverse of the CPU per page of those processes together
("all CPU/page").
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

#: The configurations compared, numerator / denominator (a crawl of each per round).
COMPARISONS = (
    ("ours-1", "original-1"),
    ("ours-2", "original-2"),
    ("ours-1", "memory-1"),
    ("memory-1", "original-1"),
)
METRICS = {
    "pages_per_s": "pages/s",
    "worker_cpu_ms_per_page": "worker CPU/page",
    "all_cpu_ms_per_page": "all CPU/page",
}
NAMES = {"ours": "ours", "original": "original", "memory": "in-memory"}


def _label(metric: str, num: str, den: str) -> str:
    workers = int(num.rsplit("-", 1)[1])
    return (
        f"{METRICS[metric]}, {workers} worker{'s' if workers > 1 else ''}: "
        f"{NAMES[num.rsplit('-', 1)[0]]} / {NAMES[den.rsplit('-', 1)[0]]}"
    )


#: (label, numerator, denominator, metric)
PAIRS = tuple(
    (_label(metric, num, den), num, den, metric) for num, den in COMPARISONS for metric in METRICS
)
CONFIGS = ("ours-1", "original-1", "memory-1", "ours-2", "original-2")


def value(crawl: dict[str, Any], metric: str) -> float:
    """One of METRICS of a crawl; "all_cpu_ms_per_page": its workers, redis-server and site."""
    if metric == "all_cpu_ms_per_page":
        return float(
            crawl["worker_cpu_ms_per_page"]
            + crawl["redis_cpu_ms_per_page"]
            + crawl["site_cpu_ms_per_page"]
        )
    return float(crawl[metric])


def cores_used(crawl: dict[str, Any]) -> float:
    """Cores kept busy by a crawl's workers, redis-server and the site."""
    return float(crawl["pages_per_s"]) * value(crawl, "all_cpu_ms_per_page") / 1000


def paired_ratios(runs: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Each round's ratios, for every pair of PAIRS, over the timed crawls of ``runs``."""
    pooled: dict[str, list[float]] = {label: [] for label, *_ in PAIRS}
    for run in runs:
        timed = run["e2e"]["timed"]
        for label, num, den, metric in PAIRS:
            if num in timed and den in timed:
                pooled[label] += [
                    value(a, metric) / value(b, metric)
                    for a, b in zip(timed[num], timed[den], strict=False)
                    if value(b, metric)
                ]
    return pooled


def spread(values: list[float], unit: str = "×") -> str:
    values = sorted(values)
    if len(values) < 2:
        return f"{values[0]:.2f}{unit}" if values else "-"
    low, _, high = statistics.quantiles(values, n=4)
    return (
        f"{statistics.median(values):.2f}{unit} (quartiles {low:.2f}–{high:.2f}, "
        f"min–max {values[0]:.2f}–{values[-1]:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="results/*.json of run.py")
    args = parser.parse_args()
    runs = [json.loads(path.read_text()) for path in args.results]
    runs = [run for run in runs if "original-1" in run.get("e2e", {}).get("timed", {})]
    if not runs:
        raise SystemExit("no end-to-end crawls of both packages in these files")
    pooled = paired_ratios(runs)
    rounds = len(next(iter(pooled.values())))
    print(f"{len(runs)} run(s), {rounds} round(s); per round, median (quartiles, min–max):")
    for label, values in pooled.items():
        if values:
            print(f"  {label}: {spread(values)}")
    print("Cores busy (workers + redis-server + site), median (quartiles, min–max):")
    for config in CONFIGS:
        crawls = [c for run in runs for c in run["e2e"]["timed"].get(config, [])]
        if crawls:
            print(f"  {config}: {spread([cores_used(c) for c in crawls], '')}")


if __name__ == "__main__":
    main()
