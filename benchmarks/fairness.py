"""Fairness of a broad crawl: how long 1 big site and many small sites take with 4 polite
workers, against the ideal polite schedule (issue 26), with SCHEDULER_FLEET_LIMITS on,
off, and with the original scrapy-redis 0.9.1.

The sites (fairness_site.py, one process): the big site on 127.0.0.2 with ``--big-pages``
pages, ``--small-sites`` sites of ``--small-pages`` pages on 127.0.0.3 and up; each page
links to the next pages of its site. ``--workers`` real ``scrapy runspider
fairness_spider.py`` workers, DOWNLOAD_DELAY = ``--delay`` without jitter (Scrapy's other
defaults: CONCURRENT_REQUESTS = 16, CONCURRENT_REQUESTS_PER_DOMAIN = 8), join; then every
site's ``/`` is pushed to ``fairness:start_urls`` (the big site first). Setups
(``--setups``): ``a`` ours with SCHEDULER_FLEET_LIMITS = True, ``b`` ours with it off
(today's queue), ``c`` the original (benchmarks/.venv-original, made on first use), ``d``
ours with it off and DOWNLOAD_DELAY = ``--delay`` x ``--workers`` (today's way to keep
a site's rate with several workers, on average).

Measured from the arrival of each request at the sites, from the push of the start URLs:
the time the last request arrived against the ideal (``--big-pages`` x ``--delay``: the big
site fetched at exactly its delay; target <= 1.15 for a), the time by which every small site
was done (target: within the first quarter of the ideal, for a), each site's rate (requests
a second from its first request to its last; the highest over the sites, and the big
site's), the highest rate over any window of 10 delays, the smallest gap between two
requests to one site, and the gaps below 0.9 delay (how many of them follow a request that
opened a new connection: it reaches the site later after the worker started it). Also
the machine's load (``/proc/loadavg``) during each run.

    nice -n 5 .venv/bin/python benchmarks/fairness.py --big-pages 500 --small-sites 50 \
        --small-pages 10 --setups a,b,c            # ideal 100 s, ~8 min
    nice -n 5 .venv/bin/python benchmarks/fairness.py --setups a   # full size, ~18 min

Prints a Markdown report; raw numbers in benchmarks/results/fairness-<time>.json, the
workers' logs in benchmarks/results/logs/fairness-*. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import HERE, LOGS, RESULTS, Redis, log, terminate
from fairness_analysis import Shape, analyse
from packages import Packages, snapshot_ours

SETUPS = {
    "a": "ours, SCHEDULER_FLEET_LIMITS on",
    "b": "ours, off (today's queue)",
    "c": "original 0.9.1",
    "d": "ours, off, delay x workers",
}
START_KEY = "fairness:start_urls"


class SitesProcess:
    """fairness_site.py in a child process; its arrivals once stopped."""

    def __init__(self, shape: Shape, out: Path) -> None:
        self.out = out
        command = [
            sys.executable,
            str(HERE / "fairness_site.py"),
            "--out",
            str(out),
            "--big-pages",
            str(shape.big_pages),
            "--small-sites",
            str(shape.small_sites),
            "--small-pages",
            str(shape.small_pages),
        ]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "READY":
            raise RuntimeError(f"the sites did not start: {line}")
        self.port = int(line[1])

    def urls(self, addresses: list[str]) -> list[str]:
        return [f"http://{address}:{self.port}/" for address in addresses]

    def served(self) -> int:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/__stats", timeout=10) as r:
            return int(json.loads(r.read())["served"])

    def stop(self) -> dict[str, Any]:
        terminate(self.proc)
        return json.loads(self.out.read_text())  # type: ignore[no-any-return]


def no_jitter() -> dict[str, Any]:
    """No random variation of the delay, in this Scrapy's words (2.19 deprecates the old)."""
    from scrapy.core import downloader

    if hasattr(downloader, "_default_jitter"):
        return {"DOWNLOAD_DELAY_JITTER": 0}
    return {"RANDOMIZE_DOWNLOAD_DELAY": False}


def worker_settings(setup: str, shape: Shape, redis_url: str) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        "REDIS_URL": redis_url,
        # The original's first worker to close would delete the others' queue (COMPAT 5.3).
        "SCHEDULER_PERSIST": True,
        "MAX_IDLE_TIME_BEFORE_CLOSE": shape.idle,
        # d: today's way to hold a site's rate with N workers: each delays N times longer.
        "DOWNLOAD_DELAY": shape.delay * (shape.workers if setup == "d" else 1),
        **no_jitter(),
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
    }
    if setup != "c":
        settings["SCHEDULER_FLEET_LIMITS"] = setup == "a"
    return settings


def start_workers(
    packages: Packages, setup: str, shape: Shape, redis_url: str, label: str
) -> tuple[list[subprocess.Popen[bytes]], list[Path]]:
    mode = "original" if setup == "c" else "ours"
    workdir = tempfile.mkdtemp(prefix="fairness-worker-")
    procs, logs = [], []
    for n in range(shape.workers):
        report, logfile = LOGS / f"{label}-w{n + 1}.json", LOGS / f"{label}-w{n + 1}.log"
        report.unlink(missing_ok=True)
        command = [
            packages.python(mode),
            "-m",
            "scrapy",
            "runspider",
            str(HERE / "fairness_spider.py"),
            "-a",
            f"report={report}",
        ]
        for name, value in worker_settings(setup, shape, redis_url).items():
            command += ["-s", f"{name}={value}"]
        with logfile.open("wb") as out:
            procs.append(
                subprocess.Popen(
                    command,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=workdir,
                    env=packages.env(mode),
                )
            )
        logs.append(logfile)
    return procs, logs


def wait_opened(procs: list[subprocess.Popen[bytes]], logs: list[Path], timeout: float) -> None:
    """Until every worker has logged 'Spider opened'."""
    deadline = time.monotonic() + timeout
    while not all("Spider opened" in p.read_text(errors="replace") for p in logs):
        if any(proc.poll() is not None for proc in procs):
            raise SystemExit(f"a worker exited before opening: see {logs}")
        if time.monotonic() > deadline:
            raise SystemExit(f"workers did not open within {timeout} s: see {logs}")
        time.sleep(0.2)


def wait_exit(
    procs: list[subprocess.Popen[bytes]], sites: SitesProcess, deadline: float, loads: list[float]
) -> float:
    """Until every worker has exited (killed at ``deadline``); the time of the last exit.
    Samples the 1-minute load average into ``loads`` every 10 s, logs progress."""
    next_sample = 0.0
    while any(proc.poll() is None for proc in procs):
        now = time.monotonic()
        if now >= next_sample:
            loads.append(os.getloadavg()[0])
            log(f"  {sites.served()} requests served, load {loads[-1]:.1f}")
            next_sample = now + 10
        if now > deadline:
            for proc in procs:
                proc.kill()
            log("WARNING: workers killed at the deadline")
            break
        time.sleep(0.1)
    return time.monotonic()


def run_setup(packages: Packages, setup: str, shape: Shape, label: str) -> dict[str, Any]:
    """One crawl of every site by the workers of ``setup``; its measures."""
    redis = Redis()
    sites = SitesProcess(shape, LOGS / f"{label}-arrivals.json")
    loads = [os.getloadavg()[0]]
    try:
        procs, logs = start_workers(packages, setup, shape, redis.url, label)
        wait_opened(procs, logs, timeout=120)
        from fairness_site import site_addresses

        addresses = site_addresses(1 + shape.small_sites)
        pushed = time.monotonic()
        redis.command("RPUSH", START_KEY, *sites.urls(addresses))
        deadline = pushed + 4 * shape.ideal + 300
        last_exit = wait_exit(procs, sites, deadline, loads)
        codes = [proc.wait() for proc in procs]
    finally:
        data = sites.stop()
        redis.stop()
    loads.append(os.getloadavg()[0])
    result = analyse(data["arrivals"], pushed, shape)
    result |= {
        "setup": setup,
        "exit_codes": codes,
        "wall_s": last_exit - pushed,
        "load_min": min(loads),
        "load_max": max(loads),
        "load_median": statistics.median(loads),
    }
    result["reports"] = [read_report(LOGS / f"{label}-w{n + 1}.json") for n in range(shape.workers)]
    return result


def read_report(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"error": "no report"}
    data = json.loads(path.read_text())
    stats = data["stats"]
    keep = ("response_received_count", "downloader/request_count", "finish_reason")
    return {
        "reason": data["reason"],
        "scrapy_redis": data["scrapy_redis"],
        **{k: stats.get(k) for k in keep},
    }


def cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def report_lines(shape: Shape, results: list[dict[str, Any]]) -> list[str]:
    ideal = shape.ideal
    lines = [
        f"Sites: 1 x {shape.big_pages} pages + {shape.small_sites} x {shape.small_pages} pages; "
        f"{shape.workers} workers; DOWNLOAD_DELAY = {shape.delay} without jitter; "
        f"ideal {ideal:,.0f} s (big site's pages x delay); polite rate {1 / shape.delay:g}/s.",
        "",
        "| setup | pages (of) | end (s) | end / ideal | small sites done (s) | / ideal | "
        "big site done (s) | big site rate (/s) | max small site rate (/s) | "
        f"peak rate, {10 * shape.delay:g} s window (/s) | min gap (s) | "
        f"gaps < {0.9 * shape.delay:g} s (after a new connection) | "
        "load 1-min (min-max) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        small = r["small_done_s"]
        lines.append(
            f"| {r['setup']}: {SETUPS[r['setup']]} | {r['pages']:,} ({r['expected_pages']:,}) | "
            f"{r['end_s']:,.1f} | {r['end_s'] / ideal:.2f} | {cell(small)} | "
            f"{cell(small / ideal if small is not None else None, 2)} | {cell(r['big_done_s'])} | "
            f"{r['big_rate']:.2f} | {r['max_small_rate']:.2f} | {r['peak_rate']:.2f} | "
            f"{r['min_gap']:.3f} | {r['gaps_below']:,} of {r['gaps']:,} "
            f"({r['gaps_below_after_new_connection']:,}) | "
            f"{r['load_min']:.1f}-{r['load_max']:.1f} |"
        )
    return lines


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big-pages", type=int, default=5000)
    parser.add_argument("--small-sites", type=int, default=100)
    parser.add_argument("--small-pages", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument(
        "--idle", type=int, default=10, help="MAX_IDLE_TIME_BEFORE_CLOSE of the workers (s)"
    )
    parser.add_argument(
        "--setups",
        default="a,b,c",
        help="a: ours, fleet limits on; b: ours, off; c: the original 0.9.1; d: ours, off, "
        "delay x workers (comma-separated, run in order)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    if not setups or set(setups) - set(SETUPS):
        raise SystemExit(f"--setups: a comma-separated list of {', '.join(SETUPS)}")
    shape = Shape(
        args.big_pages, args.small_sites, args.small_pages, args.delay, args.workers, args.idle
    )
    LOGS.mkdir(parents=True, exist_ok=True)
    ours_src, version = snapshot_ours(HERE.parent / "src")
    original = None
    if "c" in setups:
        from original_venv import original_python

        original = original_python()
    packages = Packages(ours_src, original)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = []
    try:
        for setup in setups:
            log(f"setup {setup} ({SETUPS[setup]}), ideal {shape.ideal:,.0f} s")
            results.append(run_setup(packages, setup, shape, f"fairness-{stamp}-{setup}"))
            log(f"  {report_lines(shape, results)[-1]}")
    finally:
        shutil.rmtree(ours_src, ignore_errors=True)
    out = RESULTS / f"fairness-{stamp}.json"
    out.write_text(
        json.dumps({"shape": asdict(shape), "ours": version, "results": results}, indent=1)
    )
    print(
        "\n".join(
            [
                f"# Fairness of a broad crawl ({time.strftime('%Y-%m-%d %H:%M')} UTC, ours: "
                f"{version})",
                "",
                *report_lines(shape, results),
                "",
                f"Raw: {out}",
            ]
        )
    )


if __name__ == "__main__":
    main()
