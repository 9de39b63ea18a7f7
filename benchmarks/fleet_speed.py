"""Speed when the fleet-wide limits do not bind (issue 26): pages a second of a crawl
without delays with SCHEDULER_FLEET_LIMITS on against off (target >= 0.9), and with it on
with Redis 1 ms away against the same without the delay (target >= 0.9).

The end-to-end crawl of run.py (crawls.py: ``--workers`` real workers of
bench_spider.py on site_server.py's ``--pages``-page site, no delays), in four arms, each
run in a new order (reversed every other run) so that the shared machine's drift falls
on all of them:

* ``off``: ours as today (SCHEDULER_FLEET_LIMITS off), straight to redis-server;
* ``on``: ours with SCHEDULER_FLEET_LIMITS on (and CONCURRENT_REQUESTS_PER_DOMAIN = 1000,
  so that the fleet-wide concurrency does not bind: crawls.FLEET_SETTINGS), straight;
* ``on-proxy``: ``on`` through redis_proxy.py without delay;
* ``on-1ms``: ``on`` through redis_proxy.py holding each chunk ``--delay-ms`` (0.5) each
  way: 1 ms per round trip.

Prints the median (min-max) pages/s of each arm, over the crawl phase (first
``spider_opened`` to last response, as latency.py) and over the wall time, and the
ratios: of the medians, and paired per run. For the proxied arms, the round trips per
page, how long the proxy really held each (a loaded machine wakes it late), and the
share of a worker's crawl phase those holds take: what 1 ms more per round trip can
cost, at most. Usage::

    nice -n 5 .venv/bin/python benchmarks/fleet_speed.py [--pages 2000] [--runs 3] \
        [--workers 2] [--delay-ms 0.5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import HERE, LOGS, Redis, Site, log
from crawls import crawl
from packages import Packages, snapshot_ours

#: arm -> (package mode, through the proxy, delay each way in ms or None for the option's)
ARMS: dict[str, tuple[str, bool, float | None]] = {
    "off": ("ours", False, 0.0),
    "on": ("ours-fleet", False, 0.0),
    "on-proxy": ("ours-fleet", True, 0.0),
    "on-1ms": ("ours-fleet", True, None),
}
RATIOS = (("on", "off", 0.9), ("on-1ms", "on-proxy", 0.9))


def spread(values: list[float], digits: int = 0) -> str:
    return (
        f"{statistics.median(values):,.{digits}f} "
        f"({min(values):,.{digits}f}-{max(values):,.{digits}f})"
    )


def held_ms(result: dict[str, Any]) -> float:
    """How long the proxy really held a round trip (ms: the mean hold each way, summed)."""
    held = result["proxy"].get("held", {})
    return float(sum(direction["mean_ms"] for direction in held.values()))


def trips_share(result: dict[str, Any], workers: int) -> float:
    """The share of a worker's crawl phase spent waiting for the proxy's holds: its round
    trips (the fleet's over ``workers``) times the hold, over the crawl phase; what the
    delay can cost at most, the rest of the round trip being the same in both arms."""
    pages, rate = result["pages"], result.get("crawl_pages_per_s") or 0
    if not rate:
        return 0.0
    trips = result["round_trips_per_page"] * pages / workers
    return trips * held_ms(result) / 1000 / (pages / rate)


def one_crawl(
    packages: Packages, arm: str, args: argparse.Namespace, site: Site, redis: Redis, run: int
) -> dict[str, Any]:
    mode, proxy, delay = ARMS[arm]
    delay_ms = args.delay_ms if delay is None else delay
    label = f"fleet-speed-{arm}-{run + 1}"
    result = crawl(packages, mode, args.workers, site, redis, label, proxy, delay_ms)
    polite_keys = redis.command("KEYS", "*:polite:*")
    if (mode == "ours-fleet") != bool(polite_keys):
        raise SystemExit(f"{label}: fleet limits {'off' if polite_keys else 'on'}?")
    result["load"] = os.getloadavg()[0]
    log(
        f"{label}: {result['pages']} pages, {result.get('crawl_pages_per_s', 0):,.0f} pages/s "
        f"(crawl), {result['pages_per_s']:,.0f} (wall), load {result['load']:.1f}"
    )
    return result


def report(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> list[str]:
    lines = [
        f"# Speed when limits do not bind ({time.strftime('%Y-%m-%d %H:%M')} UTC): "
        f"{args.pages} pages, {args.workers} workers, {args.runs} runs interleaved",
        "",
        "| arm | pages/s, crawl phase | pages/s, wall | worker CPU ms/page | load 1-min | "
        "round trips/page | proxy's hold ms/round trip | round trips' share of a worker |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm, runs in results.items():
        crawl_rates = [r["crawl_pages_per_s"] for r in runs]
        proxied = [r for r in runs if "proxy" in r]
        trips = spread([r["round_trips_per_page"] for r in proxied], 3) if proxied else "-"
        held = spread([held_ms(r) for r in proxied], 2) if proxied else "-"
        share = spread([trips_share(r, args.workers) for r in proxied], 3) if proxied else "-"
        lines.append(
            f"| {arm} | {spread(crawl_rates)} | {spread([r['pages_per_s'] for r in runs])} | "
            f"{spread([r['worker_cpu_ms_per_page'] for r in runs], 2)} | "
            f"{spread([r['load'] for r in runs], 1)} | {trips} | {held} | {share} |"
        )
    lines.append("")
    for top, bottom, target in RATIOS:
        for key in ("crawl_pages_per_s", "pages_per_s"):
            a = [r[key] for r in results[top]]
            b = [r[key] for r in results[bottom]]
            paired = [x / y for x, y in zip(a, b, strict=True)]
            lines.append(
                f"* {top} / {bottom} ({key}): {statistics.median(a) / statistics.median(b):.2f} "
                f"(target >= {target}); paired per run {spread(paired, 2)}"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--delay-ms", type=float, default=0.5, help="each way")
    args = parser.parse_args()
    LOGS.mkdir(parents=True, exist_ok=True)
    ours_src, version = snapshot_ours(HERE.parent / "src")
    packages = Packages(ours_src)
    redis, site = Redis(), Site(args.pages)
    results: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    try:
        for run in range(args.runs):
            order = list(ARMS) if run % 2 == 0 else list(ARMS)[::-1]
            for arm in order:
                results[arm].append(one_crawl(packages, arm, args, site, redis, run))
    finally:
        site.stop()
        redis.stop()
        shutil.rmtree(ours_src, ignore_errors=True)
    print("\n".join([*report(results, args), "", f"Ours: {version}"]))


if __name__ == "__main__":
    main()
