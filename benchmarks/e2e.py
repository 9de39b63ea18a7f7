"""The end-to-end benchmark: the site's raw throughput, timed crawls, proxied crawls.

Each run crawls the site once per mode with 1 worker (and Scrapy's in-memory
scheduler, the ceiling), then once per mode with 2 workers, the order of the
modes alternating from run to run so that drift of the shared machine falls on
all alike. The proxied crawls (their speed is not reported) count Redis round
trips, on a site of their own size when it differs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from _util import HERE, Crawls, Redis, Site, log
from crawls import crawl
from packages import Packages

#: Requests of the site's raw throughput measurement (site_load.py).
SITE_LOAD_REQUESTS = 20000


@dataclass(frozen=True)
class E2EPlan:
    """What to crawl: ``modes`` ("ours", "original", "ours-unleased"); ``ceiling``: also
    1 worker of Scrapy's in-memory scheduler; the proxied crawls crawl a site of
    ``proxy_pages`` with each of ``proxy_workers``, ``proxy_runs`` times."""

    pages: int
    runs: int
    modes: tuple[str, ...]
    ceiling: bool
    proxy_workers: tuple[int, ...]
    proxy_runs: int
    proxy_pages: int


def site_throughput(site: Site, requests: int) -> dict[str, float]:
    """Raw throughput of the site (site_load.py), and its CPU per request."""
    site.reset()
    cpu0 = site.cpu_seconds()
    proc = subprocess.run(
        [
            sys.executable,
            str(HERE / "site_load.py"),
            "--port",
            str(site.port),
            "--pages",
            str(site.pages),
            "--connections",
            "32",
            "--requests",
            str(requests),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=HERE,
    )
    data: dict[str, float] = json.loads(proc.stdout)
    data["site_cpu_us_per_request"] = (site.cpu_seconds() - cpu0) / data["requests"] * 1e6
    site.reset()
    return data


def order_of(modes: tuple[str, ...], run: int) -> tuple[str, ...]:
    """The modes in the order of ``run``: reversed every other run."""
    return modes if run % 2 == 0 else modes[::-1]


def timed_crawls(packages: Packages, redis: Redis, site: Site, plan: E2EPlan) -> Crawls:
    """Every run: each mode with 1 worker, the ceiling, each mode with 2 workers."""
    timed: Crawls = {}
    for run in range(plan.runs):
        order = order_of(plan.modes, run)
        configs = [(m, 1) for m in order] + ([("memory", 1)] if plan.ceiling else [])
        configs += [(m, 2) for m in order]
        for mode, workers in configs:
            label = f"{mode}-{workers}w-run{run + 1}"
            log(f"crawl {label}")
            last = crawl(packages, mode, workers, site, redis, label)
            timed.setdefault(f"{mode}-{workers}", []).append(last)
            log(
                f"  {last['pages']} pages in {last['wall_s']:.1f} s = "
                f"{last['pages_per_s']:.1f} pages/s, "
                f"{last['worker_cpu_ms_per_page']:.2f} CPU ms/page"
            )
    return timed


def proxied_crawls(packages: Packages, redis: Redis, site: Site, plan: E2EPlan) -> Crawls:
    """Crawls through redis_proxy.py, counting round trips."""
    proxied: Crawls = {}
    for run in range(plan.proxy_runs):
        order = order_of(plan.modes, run)
        for workers in plan.proxy_workers:
            for mode in order:
                label = f"{mode}-{workers}w-proxied{run + 1}"
                log(f"crawl {label} (counting round trips)")
                last = crawl(packages, mode, workers, site, redis, label, proxy=True)
                proxied.setdefault(f"{mode}-{workers}", []).append(last)
                log(f"  {last['round_trips_per_page']:.2f} round trips/page")
    return proxied


def e2e_benchmark(packages: Packages, redis: Redis, plan: E2EPlan) -> dict[str, Any]:
    """Timed crawls of each mode (1 and 2 workers) and proxied crawls counting round trips."""
    site = Site(plan.pages)
    try:
        log(f"site: {plan.pages} pages on port {site.port}; measuring its raw throughput")
        raw = site_throughput(site, SITE_LOAD_REQUESTS)
        timed = timed_crawls(packages, redis, site, plan)
        if plan.proxy_pages != plan.pages:
            site.stop()
            site = Site(plan.proxy_pages)
            log(f"site for the proxied crawls: {plan.proxy_pages} pages on port {site.port}")
        proxied = proxied_crawls(packages, redis, site, plan)
        return {"site": raw, "timed": timed, "proxied": proxied}
    finally:
        site.stop()
