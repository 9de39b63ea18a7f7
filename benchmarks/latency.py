"""A networked Redis: the same crawl through a proxy with and without 1 ms added per
round trip (issue #15: with +1 ms, ours at least 0.9 times the same crawl without it,
and at least 5 times the original).

Every crawl goes through redis_proxy.py (which also counts round trips), with
``--delay-ms 0`` or ``--delay-ms 0.5`` (each way), 2 workers of ``ours`` and of
the original scrapy-redis 0.9.1 (benchmarks/.venv-original, made on first use), on
the benchmark site, interleaved, ``--runs`` times. Prints per package and delay the
median (min–max) pages/s and round trips per page, and the ratios. Usage::

    .venv/bin/python benchmarks/latency.py [--pages 2000] [--runs 3] [--delay-ms 0.5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
from typing import Any

from _util import HERE, LOGS, Redis, Site, log
from crawls import crawl
from original_venv import original_python
from packages import Packages, snapshot_ours

PACKAGES = ("ours", "original")


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}–{max(values):,.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=0.5, help="each way")
    parser.add_argument("--only", choices=PACKAGES, help="one package only")
    args = parser.parse_args()
    LOGS.mkdir(parents=True, exist_ok=True)
    modes = (args.only,) if args.only else PACKAGES
    original = original_python() if "original" in modes else None
    ours_src, _ = snapshot_ours(HERE.parent / "src")
    packages = Packages(ours_src, original)
    redis, site = Redis(), Site(args.pages)
    rates: dict[tuple[str, float], list[float]] = {}
    trips: dict[tuple[str, float], list[float]] = {}
    try:
        for run in range(args.runs):
            for mode in modes:
                for delay in (0.0, args.delay_ms):
                    label = f"latency-{mode}-{delay}ms-{run + 1}"
                    result: dict[str, Any] = crawl(
                        packages, mode, 2, site, redis, label, proxy=True, delay_ms=delay
                    )
                    rate = result.get("crawl_pages_per_s") or result["pages_per_s"]
                    rates.setdefault((mode, delay), []).append(rate)
                    trips.setdefault((mode, delay), []).append(result["round_trips_per_page"])
                    per_page = result["round_trips_per_page"]
                    log(f"{label}: {rate:,.0f} pages/s, {per_page:.2f} round trips/page")
    finally:
        site.stop()
        redis.stop()
        shutil.rmtree(ours_src, ignore_errors=True)
    print(f"\n# Crawls through the proxy, {args.pages} pages, 2 workers, {args.runs} runs\n")
    print("| package | added per round trip | pages/s | round trips/page |")
    print("|---|---|---|---|")
    for (mode, delay), values in rates.items():
        per_page = statistics.median(trips[(mode, delay)])
        print(f"| {mode} | {2 * delay:g} ms | {spread(values)} | {per_page:.2f} |")
    slow = args.delay_ms
    ours_ratio = statistics.median(rates[("ours", slow)]) / statistics.median(rates[("ours", 0.0)])
    paired = [a / b for a, b in zip(rates[("ours", slow)], rates[("ours", 0.0)], strict=True)]
    print(
        f"\nours with +{2 * slow:g} ms / ours without: {ours_ratio:.2f}x (target >= 0.9); "
        f"paired per run {statistics.median(paired):.2f} ({min(paired):.2f}–{max(paired):.2f})"
    )
    if ("original", slow) in rates:
        versus = statistics.median(rates[("ours", slow)]) / statistics.median(
            rates[("original", slow)]
        )
        print(f"ours / original, both +{2 * slow:g} ms: {versus:.1f}x (target >= 5)")


if __name__ == "__main__":
    main()
