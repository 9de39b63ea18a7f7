"""One end-to-end crawl: real ``scrapy runspider bench_spider.py`` workers, measured.

crawl() flushes Redis, resets the site's hit counter, optionally puts
redis_proxy.py between the workers and redis-server (to count round trips),
launches the workers, reaps them (their CPU from ``os.wait4()``) and returns
what one crawl measures: pages/s, CPU per page of the workers, redis-server and
the site, the machine's foreign and stolen cores, and from the workers' own
reports the crawl phase, the shutdown tail and the pages of each worker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _util import (
    HERE,
    LOGS,
    Redis,
    Site,
    log,
    machine_busy_seconds,
    machine_steal_seconds,
)
from packages import OURS_VARIANTS, Packages
from sched_runner import WORKER_TIMEOUT

#: The crawl's queue without leases: our default queue class, PriorityQueue, unleased.
UNLEASED_CRAWL_QUEUE = "unleased_queues.UnleasedPriorityQueue"
#: Fleet-wide limits on, and not binding: with them the per-domain concurrency counts for
#: the whole fleet, so bench_spider.py's 16 (per worker without them) would cap 2 workers at
#: 16 downloads of the site's one slot; 1000 leaves each worker its CONCURRENT_REQUESTS.
FLEET_SETTINGS = ("SCHEDULER_FLEET_LIMITS=True", "CONCURRENT_REQUESTS_PER_DOMAIN=1000")


def worker_command(
    packages: Packages, mode: str, site: Site, redis_url: str, report: Path
) -> list[str]:
    """The command line of one worker of ``mode`` (a package, or "memory")."""
    spider = str(HERE / "bench_spider.py")
    args = [packages.python(mode), "-m", "scrapy", "runspider", spider]
    args += ["-a", f"start_url={site.start_url}", "-a", f"report={report}"]
    if mode != "memory":
        settings = (
            "SCHEDULER=scrapy_redis.scheduler.Scheduler",
            "DUPEFILTER_CLASS=scrapy_redis.dupefilter.RFPDupeFilter",
            f"REDIS_URL={redis_url}",
            # The original's first worker to close deletes the shared queue and
            # fingerprints of the others unless the data persists (COMPAT 5.3).
            "SCHEDULER_PERSIST=True",
        )
        args += [arg for setting in settings for arg in ("-s", setting)]
    if mode == "ours-unleased":
        args += ["-s", f"SCHEDULER_QUEUE_CLASS={UNLEASED_CRAWL_QUEUE}"]
    if mode == "ours-fleet":
        args += [arg for setting in FLEET_SETTINGS for arg in ("-s", setting)]
    return args


def wait_all(procs: list[subprocess.Popen[bytes]], deadline: float) -> tuple[list[float], float]:
    """Reap the workers; (CPU seconds of each, time the last one exited)."""
    cpu = [0.0] * len(procs)
    pending = dict(enumerate(procs))
    last_exit = time.perf_counter()
    while pending:
        for index, proc in list(pending.items()):
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                cpu[index] = usage.ru_utime + usage.ru_stime
                last_exit = time.perf_counter()
                del pending[index]
        if pending and time.perf_counter() > deadline:
            for proc in pending.values():
                proc.kill()
            raise RuntimeError("workers did not finish in time")
        time.sleep(0.02)
    return cpu, last_exit


class Proxy:
    """redis_proxy.py in front of ``redis``, counting round trips into ``stats_file``."""

    def __init__(self, redis: Redis, stats_file: Path, delay_ms: float = 0.0) -> None:
        self.stats_file = stats_file
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "redis_proxy.py"),
                "--target-port",
                str(redis.port),
                "--stats-file",
                str(stats_file),
                "--delay-ms",
                str(delay_ms),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = f"redis://127.0.0.1:{self.proc.stdout.readline().split()[1]}/0"

    def stop(self, pages: int) -> dict[str, Any]:
        """Stop the proxy; its counts, per page and raw."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        counts = json.loads(self.stats_file.read_text())
        return {
            "round_trips_per_page": counts["round_trips"] / pages,
            "client_commands_per_page": counts["commands"] / pages,
            "proxy": counts,
        }


@dataclass(frozen=True)
class Readings:
    """The counters a crawl is measured by, read before it starts."""

    redis_cpu: float
    site_cpu: float
    busy: float
    steal: float
    commands: int

    @classmethod
    def take(cls, redis: Redis, site: Site) -> Readings:
        redis_cpu, site_cpu = redis.cpu_seconds(), site.cpu_seconds()
        busy, steal = machine_busy_seconds(), machine_steal_seconds()
        return cls(redis_cpu, site_cpu, busy, steal, redis.commands_processed())


def launch(
    packages: Packages, mode: str, site: Site, redis_url: str, label: str, workers: int
) -> tuple[list[subprocess.Popen[bytes]], list[Path], float]:
    """Start the workers from an empty folder; (processes, report files, start time)."""
    reports = [LOGS / f"{label}-w{i + 1}.json" for i in range(workers)]
    for report in reports:
        report.unlink(missing_ok=True)
    workdir = tempfile.mkdtemp(prefix="bench-worker-")
    start = time.perf_counter()
    procs = []
    for i, report in enumerate(reports):
        with open(LOGS / f"{label}-w{i + 1}.log", "wb") as logfile:
            command = worker_command(packages, mode, site, redis_url, report)
            procs.append(
                subprocess.Popen(
                    command,
                    stdout=logfile,
                    stderr=subprocess.STDOUT,
                    cwd=workdir,
                    env=packages.env(mode),
                )
            )
    return procs, reports, start


def measures(
    mode: str,
    workers: int,
    before: Readings,
    redis: Redis,
    site: Site,
    cpu: list[float],
    wall: float,
) -> dict[str, Any]:
    """What a crawl that took ``wall`` seconds measured, from the readings ``before`` it."""
    busy, steal = machine_busy_seconds() - before.busy, machine_steal_seconds() - before.steal
    pages = site.hits()
    redis_cpu = redis.cpu_seconds() - before.redis_cpu
    site_cpu = site.cpu_seconds() - before.site_cpu
    commands = redis.commands_processed() - before.commands
    return {
        "mode": mode,
        "workers": workers,
        "pages": pages,
        "wall_s": wall,
        "pages_per_s": pages / wall,
        "worker_cpu_ms_per_page": sum(cpu) / pages * 1000,
        "redis_cpu_ms_per_page": redis_cpu / pages * 1000,
        "site_cpu_ms_per_page": site_cpu / pages * 1000,
        # Cores used meanwhile by processes that are not part of the benchmark (other
        # users of the machine; the proxy too in proxied runs): a noise indicator.
        "foreign_cores": max(0.0, busy - sum(cpu) - redis_cpu - site_cpu) / wall,
        # Cores the hypervisor took away from this VM meanwhile (another noise indicator).
        "steal_cores": steal / wall,
        "redis_commands_per_page": commands / pages if mode != "memory" else 0.0,
    }


def worker_reports(
    packages: Packages, mode: str, label: str, pages: int, infos: list[dict[str, Any]]
) -> dict[str, Any]:
    """What the workers' own reports tell (bench_spider.py), checked."""
    opened = min(i["opened_at"] for i in infos)
    last = max(i["last_response"] or i["opened_at"] for i in infos)
    modules = [i["scrapy_redis"] for i in infos]
    expected = packages.expected_module(mode)
    if expected and not all(expected in (m or "") for m in modules):
        raise SystemExit(f"{label}: workers imported the wrong package: {modules}")
    # Requests leased per worker (our scheduler's stat): none without leases.
    leased = [i["stats"].get("scheduler/leases/leased", 0) for i in infos]
    if mode in OURS_VARIANTS and (mode != "ours-unleased") != any(leased):
        raise SystemExit(f"{label}: leased per worker {leased}")
    return {
        "crawl_pages_per_s": pages / (last - opened) if last > opened else 0.0,
        "tail_s": max(i["closed_at"] for i in infos) - last,
        "responses_per_worker": [i["stats"].get("response_received_count", 0) for i in infos],
        "reasons": [i["reason"] for i in infos],
        "modules": modules,
        "leased_per_worker": leased,
    }


def crawl(
    packages: Packages,
    mode: str,
    workers: int,
    site: Site,
    redis: Redis,
    label: str,
    proxy: bool = False,
    delay_ms: float = 0.0,
) -> dict[str, Any]:
    """One crawl of the whole site by ``workers`` processes of ``mode`` (through the
    counting proxy if ``proxy``, which holds each chunk ``delay_ms`` each way)."""
    redis.flush()
    site.reset()
    proxied = Proxy(redis, LOGS / f"{label}-proxy.json", delay_ms) if proxy else None
    before = Readings.take(redis, site)
    redis_url = proxied.url if proxied else redis.url
    procs, reports, start = launch(packages, mode, site, redis_url, label, workers)
    cpu, last_exit = wait_all(procs, start + WORKER_TIMEOUT)
    result = measures(mode, workers, before, redis, site, cpu, last_exit - start)
    result["exit_codes"] = [p.returncode for p in procs]
    infos = [json.loads(r.read_text()) if r.exists() else None for r in reports]
    if all(infos):
        result |= worker_reports(packages, mode, label, result["pages"], infos)
    else:
        result["error"] = "a worker wrote no report (see its log)"
    if proxied is not None:
        result |= proxied.stop(result["pages"])
    if result["exit_codes"] != [0] * workers or "error" in result:
        log(f"WARNING: {label}: {result.get('error')} exit codes {result['exit_codes']}")
    return result
