"""Benchmark our scrapy_redis against the original scrapy-redis 0.9.1, side by side.

    python benchmarks/run.py                # full run (~14 min on 2 cores)
    python benchmarks/run.py --quick        # smoke check (< 3 min): small N, 1 run
    python benchmarks/run.py --leases-only  # cost of leases only (~5 min)

Sets up the original package in benchmarks/.venv-original if needed
(original_venv.py), starts its own redis-server on a free loopback port and the
benchmark site, then measures (see README.md for the method):

* the scheduler micro-benchmark (sched_bench.py, run by sched_runner.py) for each
  queue class, each package in a subprocess of its own interpreter (packages.py);
* Redis memory per queued request and per fingerprint;
* end-to-end crawls (e2e.py, crawls.py, bench_spider.py) with 1 and 2 workers per
  package, and one worker with Scrapy's in-memory scheduler (the ceiling);
* Redis round trips per page, through redis_proxy.py, in separate crawls;
* the cost of leases: ours as is against ours with SCHEDULER_QUEUE_CLASS =
  unleased_queues.Unleased<queue> (benchmarks/unleased_queues.py: pop()
  overridden, so our scheduler leases nothing), scheduler and end to end.

Prints the report (report.py, leases_report.py; the targets are in targets.py) and
writes it to benchmarks/results/latest.md (raw data in latest.json, worker logs in
results/logs/). This module reads the options, runs the measurements and writes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import catalog
from _util import LOGS, RESULTS, ROOT, Redis
from e2e import E2EPlan, e2e_benchmark
from original_venv import ORIGINAL_VERSION, original_python
from packages import OURS_VARIANTS, Packages, snapshot_ours
from report import report
from sched_runner import lease_scheduler_benchmark, scheduler_benchmark

#: --leases-only sizes: small enough for the whole comparison to take < 6 minutes.
LEASES_N = 5000
LEASES_PAGES = 1500
#: ... and the proxied crawls (the proxy makes a crawl ~1.5 times slower) on a smaller site.
LEASES_PROXY_PAGES = 1000


def parser() -> argparse.ArgumentParser:
    """The command line: what to run, then sizes and paths."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--list", action="store_true", help="list the benchmarks and what each measures, and exit")
    add(
        "--quick",
        action="store_true",
        help="smoke check: N=2000, 1000 pages, 1 run, round trips for 1 worker",
    )
    add(
        "--leases-only",
        action="store_true",
        help="only the cost of leases (ours with vs without; no original, no "
        f"ceiling): N={LEASES_N}, {LEASES_PAGES} pages, 3 runs, 3 proxied runs on "
        f"{LEASES_PROXY_PAGES} pages; "
        "writes results/leases.md",
    )
    add("--skip-leases", action="store_true", help="full run without ours-without-leases")
    add("--runs", type=int, help="runs of each measurement (default 3)")
    add(
        "--proxy-runs",
        type=int,
        help="proxied crawls per package and worker count (default 1; --leases-only: as --runs)",
    )
    add(
        "--proxy-pages",
        type=int,
        help="site size of the proxied crawls (default: --pages; --leases-only: "
        f"{LEASES_PROXY_PAGES})",
    )
    add_sizes(parser)
    return parser


def add_sizes(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--n", type=int, help="requests per scheduler phase (default 10000)")
    add("--pages", type=int, help="pages of the site (default 5000)")
    add("--skip-scheduler", action="store_true")
    add("--skip-e2e", action="store_true")
    add("--output", type=Path, help="default results/latest.md (--leases-only: results/leases.md)")
    add(
        "--ours-src",
        type=Path,
        default=ROOT / "src",
        help="the src/ folder holding our scrapy_redis (default: this checkout)",
    )


@dataclass(frozen=True)
class Plan:
    """What a run measures, from the options and their defaults."""

    args: argparse.Namespace
    runs: int
    n: int
    pages: int
    proxy_runs: int
    proxy_pages: int
    modes: tuple[str, ...]

    @property
    def output(self) -> Path:
        default = RESULTS / ("leases.md" if self.args.leases_only else "latest.md")
        return self.args.output or default

    def e2e(self) -> E2EPlan:
        """The crawls: the ceiling only with the original, round trips of 2 workers
        unless --quick."""
        return E2EPlan(
            pages=self.pages,
            runs=self.runs,
            modes=self.modes,
            ceiling=not self.args.leases_only,
            proxy_workers=(1,) if self.args.quick else (1, 2),
            proxy_runs=self.proxy_runs,
            proxy_pages=self.proxy_pages,
        )

    def config(self) -> dict[str, Any]:
        """The plan as the JSON file and the report record it."""
        return {
            "runs": self.runs,
            "n": self.n,
            "pages": self.pages,
            "quick": self.args.quick,
            "leases_only": self.args.leases_only,
            "proxy_runs": self.proxy_runs,
            "proxy_pages": self.proxy_pages,
            "modes": self.modes,
        }


def plan_of(args: argparse.Namespace) -> Plan:
    """The defaults of a full run, of --quick and of --leases-only."""
    runs = args.runs or (1 if args.quick else 3)
    if args.leases_only:
        n = args.n or (2000 if args.quick else LEASES_N)
        pages = args.pages or (1000 if args.quick else LEASES_PAGES)
        proxy_runs = args.proxy_runs or runs
        proxy_pages = args.proxy_pages or min(pages, LEASES_PROXY_PAGES)
    else:
        n = args.n or (2000 if args.quick else 10000)
        pages = args.pages or (1000 if args.quick else 5000)
        proxy_runs = args.proxy_runs or 1
        proxy_pages = args.proxy_pages or pages
    if args.leases_only:
        modes: tuple[str, ...] = OURS_VARIANTS
    elif args.skip_leases:
        modes = ("ours", "original")
    else:
        modes = ("ours", "original", "ours-unleased")
    return Plan(args, runs, n, pages, proxy_runs, proxy_pages, modes)


def machine() -> str:
    """Host, CPUs, kernel and the versions that matter."""
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{platform.node()}: {os.cpu_count()} CPUs ({model}), Linux {platform.release()}, "
        f"Python {platform.python_version()}, Scrapy {version('scrapy')}, "
        f"redis-py {version('redis')}"
    )


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def describe(plan: Plan, packages: Packages, ours_source: str) -> dict[str, Any]:
    """What the JSON file and the report's header record before the measurements."""
    return {
        "ours_source": ours_source,
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "machine": machine(),
        "command": "python benchmarks/run.py " + " ".join(sys.argv[1:]),
        "config": plan.config(),
        "load_start": load_average(),
        "ours_version": packages.ours_version(),
        "original_version": ORIGINAL_VERSION,
    }


def measure(plan: Plan, packages: Packages, data: dict[str, Any]) -> None:
    """Run the measurements of ``plan`` against a redis-server of our own, into ``data``."""
    redis = Redis()
    try:
        data["redis_version"] = redis.info("server")["redis_version"]
        if not plan.args.skip_scheduler:
            if packages.original is not None:
                data["scheduler"] = scheduler_benchmark(packages, redis, plan.n, plan.runs)
            if "ours-unleased" in plan.modes:
                data["leases_scheduler"] = lease_scheduler_benchmark(
                    packages, redis, plan.n, plan.runs
                )
        if not plan.args.skip_e2e:
            data["e2e"] = e2e_benchmark(packages, redis, plan.e2e())
    finally:
        redis.stop()


def write(data: dict[str, Any], output: Path) -> None:
    """The report to ``output`` and stdout, the raw data beside it (.json)."""
    text, verdicts = report(data)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    output.with_suffix(".json").write_text(json.dumps(data, indent=1, default=str))
    print(text)
    if verdicts:
        met = sum(1 for verdict in verdicts if verdict.met)
        print(f"{met} of {len(verdicts)} targets met.")
    print(f"Written to {output} ({data['elapsed_s'] / 60:.1f} min).")


def main() -> None:
    cli = parser()
    args = cli.parse_args()
    if args.list:
        print(catalog.text(), end="")
        return
    if args.leases_only and args.skip_leases:
        cli.error("--leases-only and --skip-leases exclude each other")
    plan = plan_of(args)
    started = time.perf_counter()
    LOGS.mkdir(parents=True, exist_ok=True)
    original = None if args.leases_only else original_python()
    ours_src, ours_source = snapshot_ours(args.ours_src.resolve())
    packages = Packages(ours_src, original)
    try:
        data = describe(plan, packages, ours_source)
        measure(plan, packages, data)
    finally:
        shutil.rmtree(ours_src, ignore_errors=True)
    data["load_end"] = load_average()
    data["elapsed_s"] = time.perf_counter() - started
    write(data, plan.output)


if __name__ == "__main__":
    main()
