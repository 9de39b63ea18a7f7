# ruff: noqa: RUF001, C901
"""Benchmark our scrapy_redis against the original scrapy-redis 0.9.1, side by side.

    python benchmarks/run.py                # full run (~20 min on 2 cores)
    python benchmarks/run.py --quick        # smoke check (< 3 min): small N, 1 run
    python benchmarks/run.py --leases-only  # cost of leases only (~5 min)

Sets up the original package in benchmarks/.venv-original if needed (``python -m
venv`` + ``pip install scrapy-redis==0.9.1`` with the same Scrapy, redis-py,
Twisted, w3lib, lxml and parsel versions as this interpreter), starts its own
redis-server on a free loopback port and the benchmark site, then measures
(see README.md for the method):

* the scheduler micro-benchmark (sched_bench.py) for each queue class, each
  package in a subprocess of its own interpreter;
* Redis memory per queued request and per fingerprint;
* end-to-end crawls (bench_spider.py) with 1 and 2 workers per package, and one
  worker with Scrapy's in-memory scheduler (the ceiling);
* Redis round trips per page, through redis_proxy.py, in separate crawls;
* the cost of leases: ours as is against ours with SCHEDULER_QUEUE_CLASS =
  unleased_queues.Unleased<queue> (benchmarks/unleased_queues.py: pop()
  overridden, so our scheduler leases nothing), scheduler and end to end.

Prints the table and writes it to benchmarks/results/latest.md (raw data in
latest.json, worker logs in results/logs/).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import (
    HERE,
    ROOT,
    Redis,
    Site,
    machine_busy_seconds,
    machine_steal_seconds,
    summary,
)
from pool import CONFIGS, cores_used

VENV = HERE / ".venv-original"
RESULTS = HERE / "results"
LOGS = RESULTS / "logs"
ORIGINAL = "scrapy-redis==0.9.1"
# Same versions as ours runs with, so only the scrapy_redis package differs.
PINNED = ("scrapy", "redis", "twisted", "w3lib", "lxml", "parsel")
QUEUES = ("FifoQueue", "LifoQueue", "PriorityQueue")
WORKER_TIMEOUT = 600.0
#: Ours as is (leases), and ours popping without leases (see unleased_queues.py).
OURS_VARIANTS = ("ours", "ours-unleased")
#: The crawl's queue without leases: our default queue class, PriorityQueue, unleased.
UNLEASED_CRAWL_QUEUE = "unleased_queues.UnleasedPriorityQueue"
#: --leases-only sizes: small enough for the whole comparison to take < 6 minutes.
LEASES_N = 5000
LEASES_PAGES = 1500
#: ... and the proxied crawls (the proxy makes a crawl ~1.5 times slower) on a smaller site.
LEASES_PROXY_PAGES = 1000

#: Where ours is imported from: a copy of src/scrapy_redis taken when the run starts
#: (see snapshot_ours), so that edits made to src/ during a run do not mix versions.
OURS_SRC: Path = ROOT / "src"

TARGETS = {
    "e2e1": 1.3, "e2e2": 1.3, "cpu": 0.85, "rtt": 2.0, "sched": 5.0, "memory": 0.5,
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- interpreters -----------------------------------------------------------------------

def original_python() -> Path:
    """The venv's interpreter with scrapy-redis 0.9.1, created on first use."""
    python = VENV / "bin" / "python"
    check = [str(python), "-c", "import scrapy_redis; print(scrapy_redis.__version__)"]
    if python.exists():
        found = subprocess.run(check, capture_output=True, text=True, env=clean_env())
        if found.stdout.strip() == "0.9.1":
            return python
    log(f"creating {VENV} with {ORIGINAL} (one-time, ~30 s)")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
    pins = [f"{name}=={version(name)}" for name in PINNED]
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         ORIGINAL, *pins],
        check=True, env=clean_env(),
    )
    found = subprocess.run(check, capture_output=True, text=True, env=clean_env())
    if found.stdout.strip() != "0.9.1":
        raise SystemExit(f"the original package did not install: {found.stderr}")
    return python


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT")}
    env["PYTHONHASHSEED"] = "0"
    return env


def package_env(package: str) -> dict[str, str]:
    env = clean_env()
    if package in OURS_VARIANTS:
        # benchmarks/ after ours, for unleased_queues; both variants get the same path.
        env["PYTHONPATH"] = os.pathsep.join([str(OURS_SRC), str(HERE)])
    return env


def snapshot_ours(src: Path) -> str:
    """Copy ``src/scrapy_redis`` to a temporary folder and import ours from there.

    Returns a description of the version: git commit, ``+dirty`` if src/ has
    uncommitted changes.
    """
    global OURS_SRC
    dest = Path(tempfile.mkdtemp(prefix="bench-ours-src-"))
    shutil.copytree(src / "scrapy_redis", dest / "scrapy_redis",
                    ignore=shutil.ignore_patterns("__pycache__"))
    OURS_SRC = dest
    git = ["git", "-C", str(src)]
    rev = subprocess.run([*git, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip() or "?"
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "."],
                           capture_output=True, text=True).stdout.strip()
    return f"{src} at {rev}{' + uncommitted changes' if dirty else ''}"


def ours_marker() -> str:
    return f"{OURS_SRC}/scrapy_redis/"


def interpreter(package: str, original: Path | None) -> str:
    if package == "original":
        assert original is not None
        return str(original)
    return sys.executable


def expected_module(package: str) -> str | None:
    """A part of the path every process of ``package`` must import scrapy_redis from."""
    if package in OURS_VARIANTS:
        return ours_marker()
    return "/.venv-original/" if package == "original" else None


# -- scheduler micro-benchmark ------------------------------------------------------------

def sched_run(
    package: str, original: Path | None, redis: Redis, queue: str, n: int, extra: list[str]
) -> dict[str, Any]:
    """One sched_bench.py process; its JSON, checked."""
    proc = subprocess.run(
        [interpreter(package, original), str(HERE / "sched_bench.py"),
         "--redis-url", redis.url, "--queue", queue, "--n", str(n), *extra],
        capture_output=True, text=True, env=package_env(package), cwd=HERE,
        timeout=WORKER_TIMEOUT,
    )
    if proc.returncode != 0:
        raise SystemExit(f"sched_bench failed ({package} {queue}):\n{proc.stderr}")
    data: dict[str, Any] = json.loads(proc.stdout)
    expected = expected_module(package)
    if expected and expected not in data["module"]:
        raise SystemExit(f"{package} imported the wrong package: {data['module']}")
    if not data["ok"]:
        log(f"WARNING: {package} {queue} failed its checks: {data['checks']}")
    return data


def scheduler_benchmark(redis: Redis, original: Path, n: int, runs: int) -> dict[str, Any]:
    results: dict[str, dict[str, list[dict[str, Any]]]] = {
        pkg: {q: [] for q in QUEUES} for pkg in ("ours", "original")
    }
    for run in range(runs):
        order = ("ours", "original") if run % 2 == 0 else ("original", "ours")
        for queue in QUEUES:
            for package in order:
                log(f"scheduler run {run + 1}/{runs}: {package} {queue} n={n}")
                results[package][queue].append(sched_run(package, original, redis, queue, n, []))
    return results


def lease_scheduler_benchmark(redis: Redis, n: int, runs: int) -> dict[str, Any]:
    """Ours with and without leases, interleaved in one process (sched_bench.py --paired):
    enqueue, then dequeue half acking each request, half not acking."""
    results: dict[str, dict[str, list[dict[str, Any]]]] = {
        v: {q: [] for q in QUEUES} for v in OURS_VARIANTS
    }
    for run in range(runs):
        for queue in QUEUES:
            log(f"lease scheduler run {run + 1}/{runs}: {queue}, with and without leases, n={n}")
            data = sched_run("ours", None, redis, queue, n, ["--paired"])
            for variant in OURS_VARIANTS:
                got = data["variants"][variant]
                if got["uses_leases"] != (variant == "ours"):
                    raise SystemExit(f"{variant} {queue}: uses_leases = {got['uses_leases']} "
                                     f"({got['queue_class']})")
                results[variant][queue].append(got)
    return results


# -- end-to-end crawls --------------------------------------------------------------------

def worker_command(
    mode: str, original: Path | None, site: Site, redis_url: str, report: Path
) -> list[str]:
    python = interpreter(mode, original) if mode != "memory" else sys.executable
    args = [python, "-m", "scrapy", "runspider", str(HERE / "bench_spider.py"),
            "-a", f"start_url={site.start_url}", "-a", f"report={report}"]
    if mode != "memory":
        args += ["-s", "SCHEDULER=scrapy_redis.scheduler.Scheduler",
                 "-s", "DUPEFILTER_CLASS=scrapy_redis.dupefilter.RFPDupeFilter",
                 "-s", f"REDIS_URL={redis_url}",
                 # The original's first worker to close deletes the shared queue and
                 # fingerprints of the others unless the data persists (COMPAT 5.3).
                 "-s", "SCHEDULER_PERSIST=True"]
    if mode == "ours-unleased":
        args += ["-s", f"SCHEDULER_QUEUE_CLASS={UNLEASED_CRAWL_QUEUE}"]
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


def crawl(
    mode: str, workers: int, original: Path | None, site: Site, redis: Redis, label: str,
    proxy: bool = False,
) -> dict[str, Any]:
    """One crawl of the whole site by ``workers`` processes of ``mode``."""
    redis.flush()
    site.reset()
    proxy_proc = None
    redis_url = redis.url
    stats_file = LOGS / f"{label}-proxy.json"
    if proxy:
        proxy_proc = subprocess.Popen(
            [sys.executable, str(HERE / "redis_proxy.py"), "--target-port", str(redis.port),
             "--stats-file", str(stats_file)], stdout=subprocess.PIPE, text=True,
        )
        assert proxy_proc.stdout is not None
        redis_url = f"redis://127.0.0.1:{proxy_proc.stdout.readline().split()[1]}/0"
    redis_cpu0, site_cpu0 = redis.cpu_seconds(), site.cpu_seconds()
    busy0, steal0 = machine_busy_seconds(), machine_steal_seconds()
    commands0 = redis.commands_processed()
    reports = [LOGS / f"{label}-w{i + 1}.json" for i in range(workers)]
    for report in reports:
        report.unlink(missing_ok=True)
    workdir = tempfile.mkdtemp(prefix="bench-worker-")
    start = time.perf_counter()
    procs = []
    for i, report in enumerate(reports):
        with open(LOGS / f"{label}-w{i + 1}.log", "wb") as logfile:
            procs.append(subprocess.Popen(
                worker_command(mode, original, site, redis_url, report),
                stdout=logfile, stderr=subprocess.STDOUT, cwd=workdir,
                env=package_env(mode),
            ))
    cpu, last_exit = wait_all(procs, start + WORKER_TIMEOUT)
    wall = last_exit - start
    busy, steal = machine_busy_seconds() - busy0, machine_steal_seconds() - steal0
    pages = site.hits()
    redis_cpu, site_cpu = redis.cpu_seconds() - redis_cpu0, site.cpu_seconds() - site_cpu0
    result: dict[str, Any] = {
        "mode": mode, "workers": workers, "pages": pages, "wall_s": wall,
        "pages_per_s": pages / wall,
        "worker_cpu_ms_per_page": sum(cpu) / pages * 1000,
        "redis_cpu_ms_per_page": redis_cpu / pages * 1000,
        "site_cpu_ms_per_page": site_cpu / pages * 1000,
        # Cores used meanwhile by processes that are not part of the benchmark (other
        # users of the machine; the proxy too in proxied runs): a noise indicator.
        "foreign_cores": max(0.0, busy - sum(cpu) - redis_cpu - site_cpu) / wall,
        # Cores the hypervisor took away from this VM meanwhile (another noise indicator).
        "steal_cores": steal / wall,
        "redis_commands_per_page": (redis.commands_processed() - commands0) / pages
        if mode != "memory" else 0.0,
        "exit_codes": [p.returncode for p in procs],
    }
    infos = [json.loads(r.read_text()) if r.exists() else None for r in reports]
    if all(infos):
        opened = min(i["opened_at"] for i in infos)
        last = max(i["last_response"] or i["opened_at"] for i in infos)
        result["crawl_pages_per_s"] = pages / (last - opened) if last > opened else 0.0
        result["tail_s"] = max(i["closed_at"] for i in infos) - last
        result["responses_per_worker"] = [
            i["stats"].get("response_received_count", 0) for i in infos
        ]
        result["reasons"] = [i["reason"] for i in infos]
        result["modules"] = [i["scrapy_redis"] for i in infos]
        expected = expected_module(mode)
        if expected and not all(expected in (m or "") for m in result["modules"]):
            raise SystemExit(f"{label}: workers imported the wrong package: {result['modules']}")
        # Requests leased per worker (our scheduler's stat): none without leases.
        result["leased_per_worker"] = [
            i["stats"].get("scheduler/leases/leased", 0) for i in infos
        ]
        if mode in OURS_VARIANTS and (mode == "ours") != any(result["leased_per_worker"]):
            raise SystemExit(f"{label}: leased per worker {result['leased_per_worker']}")
    else:
        result["error"] = "a worker wrote no report (see its log)"
    if proxy_proc is not None:
        proxy_proc.send_signal(signal.SIGTERM)
        proxy_proc.wait(30)
        counts = json.loads(stats_file.read_text())
        result["round_trips_per_page"] = counts["round_trips"] / pages
        result["client_commands_per_page"] = counts["commands"] / pages
        result["proxy"] = counts
    if result["exit_codes"] != [0] * workers or "error" in result:
        log(f"WARNING: {label}: {result.get('error')} exit codes {result['exit_codes']}")
    return result


def site_throughput(site: Site, requests: int) -> dict[str, float]:
    site.reset()
    cpu0 = site.cpu_seconds()
    proc = subprocess.run(
        [sys.executable, str(HERE / "site_load.py"), "--port", str(site.port),
         "--pages", str(site.pages), "--connections", "32", "--requests", str(requests)],
        capture_output=True, text=True, check=True, cwd=HERE,
    )
    data: dict[str, float] = json.loads(proc.stdout)
    data["site_cpu_us_per_request"] = (site.cpu_seconds() - cpu0) / data["requests"] * 1e6
    site.reset()
    return data


def e2e_benchmark(
    redis: Redis, original: Path | None, pages: int, runs: int,
    proxy_workers: tuple[int, ...], modes: tuple[str, ...], ceiling: bool, proxy_runs: int,
    proxy_pages: int,
) -> dict[str, Any]:
    """Timed crawls of each mode (1 and 2 workers) and proxied crawls counting round trips.

    ``modes``: "ours", "original", "ours-unleased"; ``ceiling``: also 1 worker of
    Scrapy's in-memory scheduler; the proxied crawls crawl a site of ``proxy_pages``.
    """
    site = Site(pages)
    try:
        log(f"site: {pages} pages on port {site.port}; measuring its raw throughput")
        raw = site_throughput(site, 20000)
        timed: dict[str, list[dict[str, Any]]] = {}
        for run in range(runs):
            # Alternate the order of the modes, so drift of the machine is shared.
            order = modes if run % 2 == 0 else modes[::-1]
            configs = [(m, 1) for m in order] + ([("memory", 1)] if ceiling else [])
            configs += [(m, 2) for m in order]
            for mode, workers in configs:
                label = f"{mode}-{workers}w-run{run + 1}"
                log(f"crawl {label}")
                last = crawl(mode, workers, original, site, redis, label)
                timed.setdefault(f"{mode}-{workers}", []).append(last)
                log(f"  {last['pages']} pages in {last['wall_s']:.1f} s = "
                    f"{last['pages_per_s']:.1f} pages/s, "
                    f"{last['worker_cpu_ms_per_page']:.2f} CPU ms/page")
        proxied: dict[str, list[dict[str, Any]]] = {}
        if proxy_pages != pages:
            site.stop()
            site = Site(proxy_pages)
            log(f"site for the proxied crawls: {proxy_pages} pages on port {site.port}")
        for run in range(proxy_runs):
            order = modes if run % 2 == 0 else modes[::-1]
            for workers in proxy_workers:
                for mode in order:
                    label = f"{mode}-{workers}w-proxied{run + 1}"
                    log(f"crawl {label} (counting round trips)")
                    last = crawl(mode, workers, original, site, redis, label, proxy=True)
                    proxied.setdefault(f"{mode}-{workers}", []).append(last)
                    log(f"  {last['round_trips_per_page']:.2f} round trips/page")
        return {"site": raw, "timed": timed, "proxied": proxied}
    finally:
        site.stop()


# -- report -------------------------------------------------------------------------------

def fmt(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def cell(values: list[float]) -> str:
    s = summary(values)
    if len(values) == 1:
        return fmt(s["median"])
    return f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])})"


def median(values: list[float]) -> float:
    return summary(values)["median"]


def rx(value: float, target: float) -> str:
    """A ratio for a target's line: a third decimal when two would look like the target."""
    return f"{value:.3f}×" if f"{value:.2f}" == f"{target:.2f}" else f"{value:.2f}×"


def ratio(ours: float, original: float) -> float:
    return ours / original if original else float("nan")


def machine() -> str:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{platform.node()}: {os.cpu_count()} CPUs ({model}), Linux {platform.release()}, "
            f"Python {platform.python_version()}, Scrapy {version('scrapy')}, "
            f"redis-py {version('redis')}")


def ceiling_by_run(ours: list[float], original: list[float], memory: list[float]) -> list[str]:
    """Each run's 1-worker crawls against the ceiling crawled in the same run, minutes
    apart: how fast the machine was then falls on all three alike."""
    if not (len(ours) == len(original) == len(memory)) or not memory:
        return []
    return [
        "Per run, pages/s as a fraction of that run's ceiling: ours "
        + ", ".join(f"{o / m:.2f}" for o, m in zip(ours, memory, strict=True))
        + "; the original "
        + ", ".join(f"{g / m:.2f}" for g, m in zip(original, memory, strict=True))
        + ". The ceiling over the original, the most a scheduler as fast as Scrapy's own "
        "could score: "
        + ", ".join(f"{m / g:.2f}×" for g, m in zip(original, memory, strict=True))
        + f" (median {median([m / g for g, m in zip(original, memory, strict=True)]):.2f}×).  ",
    ]


def steal_note(timed: dict[str, list[dict[str, Any]]]) -> str:
    """The cores the hypervisor took from this VM during the crawls, when measured."""
    steal = [r["steal_cores"] for v in timed.values() for r in v if "steal_cores" in r]
    return f"; the hypervisor took {cell(steal)} (steal time)" if steal else ""


def report(data: dict[str, Any]) -> tuple[str, list[tuple[str, bool]]]:
    lines: list[str] = []
    targets: list[tuple[str, bool]] = []
    cfg = data["config"]
    title = (f"cost of leases in ours ({data['ours_version']}): with vs without"
             if cfg.get("leases_only") else
             f"ours ({data['ours_version']}) vs original (scrapy-redis {data['original_version']})")
    lines += [
        f"# scrapy_redis benchmark: {title}",
        "",
        f"Date: {data['date']}  ",
        f"Machine: {data['machine']}  ",
        f"Redis: {data['redis_version']}; load average at start {data['load_start']}, "
        f"at end {data['load_end']}; total time {data['elapsed_s'] / 60:.1f} min  ",
        f"Ours: {data['ours_source']} (copied when the run started).  ",
        f"Command: `{data['command'].strip()}` — median (min–max) of {cfg['runs']} run(s).",
        "",
    ]
    if "scheduler" in data:
        sched = data["scheduler"]
        lines += [
            f"## Scheduler (N = {cfg['n']:,} requests per phase; rates in requests/s)", "",
            "| measure | queue | ours | original | ours/original | target |",
            "|---|---|---|---|---|---|",
        ]
        for key, title in (("enqueue_rate", "enqueue, new requests"),
                           ("dup_enqueue_rate", "enqueue, 50% duplicates"),
                           ("dequeue_rate", "dequeue")):
            for queue in QUEUES:
                ours = [r[key] for r in sched["ours"][queue]]
                orig = [r[key] for r in sched["original"][queue]]
                r = ratio(median(ours), median(orig))
                met = r >= TARGETS["sched"]
                shown = rx(r, TARGETS["sched"])
                targets.append((f"scheduler {title}, {queue}: {shown} (≥ 5×)", met))
                lines.append(f"| {title} | {queue} | {cell(ours)} | {cell(orig)} | "
                             f"{shown} | ≥ 5× {'✅' if met else '❌'} |")
        lines += ["", "Client CPU per operation (µs, median; the rest of the wall time is "
                  "waiting for Redis):", "",
                  "| operation | queue | ours | original | ours/original |",
                  "|---|---|---|---|---|"]
        for key, title in (("enqueue_cpu_us", "enqueue, new"),
                           ("dup_enqueue_cpu_us", "enqueue, 50% dup"),
                           ("dequeue_cpu_us", "dequeue")):
            for queue in QUEUES:
                ours_v = median([r[key] for r in sched["ours"][queue]])
                orig_v = median([r[key] for r in sched["original"][queue]])
                lines.append(f"| {title} | {queue} | {fmt(ours_v)} | {fmt(orig_v)} | "
                             f"{ratio(ours_v, orig_v):.2f}× |")
        lines += ["", "## Redis memory (bytes; MEMORY USAGE … SAMPLES 0 of the keys / N)", "",
                  "| measure | queue | ours | original | ours/original | target |",
                  "|---|---|---|---|---|---|"]
        for queue in QUEUES:
            ours_v = median([r["queue_bytes_per_request"] for r in sched["ours"][queue]])
            orig_v = median([r["queue_bytes_per_request"] for r in sched["original"][queue]])
            r = ratio(ours_v, orig_v)
            met = r <= TARGETS["memory"]
            shown = rx(r, TARGETS["memory"])
            targets.append((f"Redis bytes per queued request, {queue}: {shown} (≤ 0.5×)", met))
            lines.append(f"| per queued request | {queue} | {fmt(ours_v)} | {fmt(orig_v)} | "
                         f"{shown} | ≤ 0.5× {'✅' if met else '❌'} |")
        for queue in QUEUES:
            ours_v = median([r["used_memory_per_request"] for r in sched["ours"][queue]])
            orig_v = median([r["used_memory_per_request"] for r in sched["original"][queue]])
            lines.append(f"| INFO used_memory delta per request (queue + fingerprint) | {queue} | "
                         f"{fmt(ours_v)} | {fmt(orig_v)} | {ratio(ours_v, orig_v):.2f}× | |")
        ours_v = median([r["df_bytes_per_fingerprint"] for q in QUEUES
                         for r in sched["ours"][q]])
        orig_v = median([r["df_bytes_per_fingerprint"] for q in QUEUES
                         for r in sched["original"][q]])
        lines.append(f"| per fingerprint (dupefilter set) | all | {fmt(ours_v)} | {fmt(orig_v)} | "
                     f"{ratio(ours_v, orig_v):.2f}× | |")
        lines.append("")
    if "e2e" in data and "original-1" in data["e2e"]["timed"]:
        e2e = data["e2e"]
        timed = e2e["timed"]
        site = e2e["site"]
        lines += [
            f"## End to end: crawl of a local site of {cfg['pages']:,} pages (~10 links each), "
            "CONCURRENT_REQUESTS 16", "",
            "| measure | ours | original | ours/original | target |",
            "|---|---|---|---|---|",
        ]

        def vals(key: str, metric: str) -> list[float]:
            return [r[metric] for r in timed[key] if metric in r]

        for workers, tkey in ((1, "e2e1"), (2, "e2e2")):
            ours = vals(f"ours-{workers}", "pages_per_s")
            orig = vals(f"original-{workers}", "pages_per_s")
            r = ratio(median(ours), median(orig))
            met = r >= TARGETS[tkey]
            shown = rx(r, TARGETS[tkey])
            targets.append((f"end-to-end pages/s, {workers} worker(s): {shown} (≥ 1.3×)", met))
            lines.append(f"| pages/s, {workers} worker{'s' if workers > 1 else ''} "
                         f"(launch → last exit) | {cell(ours)} | {cell(orig)} | {shown} | "
                         f"≥ 1.3× {'✅' if met else '❌'} |")
        for workers in (1, 2):
            ours = vals(f"ours-{workers}", "crawl_pages_per_s")
            orig = vals(f"original-{workers}", "crawl_pages_per_s")
            if ours and orig:
                lines.append(f"| pages/s, {workers} worker{'s' if workers > 1 else ''} "
                             f"(crawl phase: open → last response) | {cell(ours)} | "
                             f"{cell(orig)} | {ratio(median(ours), median(orig)):.2f}× | |")
        for workers in (1, 2):
            ours = vals(f"ours-{workers}", "worker_cpu_ms_per_page")
            orig = vals(f"original-{workers}", "worker_cpu_ms_per_page")
            r = ratio(median(ours), median(orig))
            met = r <= TARGETS["cpu"]
            shown = rx(r, TARGETS["cpu"])
            targets.append((f"worker CPU per page, {workers} worker(s): {shown} (≤ 0.85×)", met))
            lines.append(f"| worker CPU ms/page, {workers} worker{'s' if workers > 1 else ''} | "
                         f"{cell(ours)} | {cell(orig)} | {shown} | "
                         f"≤ 0.85× {'✅' if met else '❌'} |")
        proxied = e2e["proxied"]
        for workers in sorted({int(k.rsplit("-", 1)[1]) for k in proxied}):
            ours_r = proxied[f"ours-{workers}"]
            orig_r = proxied[f"original-{workers}"]
            rt = median([r["round_trips_per_page"] for r in ours_r])
            rt_orig = median([r["round_trips_per_page"] for r in orig_r])
            met = rt <= TARGETS["rtt"]
            targets.append((f"Redis round trips per page, {workers} worker(s): ours {rt:.2f} "
                            "(≤ 2)", met))
            lines.append(f"| Redis round trips/page, {workers} worker"
                         f"{'s' if workers > 1 else ''} (proxy count, {len(ours_r)} run"
                         f"{'s' if len(ours_r) > 1 else ''}) | "
                         f"{cell([r['round_trips_per_page'] for r in ours_r])} | "
                         f"{cell([r['round_trips_per_page'] for r in orig_r])} | "
                         f"{ratio(rt, rt_orig):.2f}× | ours ≤ 2 {'✅' if met else '❌'} |")
            sent = median([r["client_commands_per_page"] for r in ours_r])
            sent_orig = median([r["client_commands_per_page"] for r in orig_r])
            lines.append(f"| commands sent/page, {workers} worker{'s' if workers > 1 else ''} "
                         f"(a script call = 1) | {fmt(sent)} | {fmt(sent_orig)} | "
                         f"{ratio(sent, sent_orig):.2f}× | |")
        for workers in (1, 2):
            for metric, title in (("redis_commands_per_page", "Redis commands executed/page "
                                   "(INFO, incl. inside scripts)"),
                                  ("redis_cpu_ms_per_page", "redis-server CPU ms/page"),
                                  ("tail_s", "seconds from last response to last exit")):
                ours = vals(f"ours-{workers}", metric)
                orig = vals(f"original-{workers}", metric)
                if ours and orig:
                    lines.append(f"| {title}, {workers} worker{'s' if workers > 1 else ''} | "
                                 f"{cell(ours)} | {cell(orig)} | "
                                 f"{ratio(median(ours), median(orig)):.2f}× | |")
        memory = vals("memory-1", "pages_per_s")
        memory_cpu = vals("memory-1", "worker_cpu_ms_per_page")
        lines += [
            "",
            f"Ceiling — Scrapy's own in-memory scheduler and dupefilter, 1 worker: "
            f"**{cell(memory)} pages/s**, {cell(memory_cpu)} worker CPU ms/page "
            f"(ours reaches {ratio(median(vals('ours-1', 'pages_per_s')), median(memory)):.2f}× "
            f"of it, the original "
            f"{ratio(median(vals('original-1', 'pages_per_s')), median(memory)):.2f}×).  ",
            *ceiling_by_run(vals("ours-1", "pages_per_s"), vals("original-1", "pages_per_s"),
                            memory),
            f"Site raw throughput (asyncio keep-alive client, 32 connections, "
            f"{site['requests']:,} requests): **{fmt(site['rps'])} requests/s**, "
            f"{site['site_cpu_us_per_request']:.0f} µs site CPU per request; during the "
            f"crawls the site used "
            f"{median([r['site_cpu_ms_per_page'] for v in timed.values() for r in v]):.3f} "
            "CPU ms per page.",
            "",
            "Other processes on this shared machine used "
            + cell([r.get("foreign_cores", 0.0) for v in timed.values() for r in v])
            + " of the 2 cores during the timed crawls (median (min–max); a noise indicator)"
            + steal_note(timed) + ".",
            "",
            "Cores kept busy by each crawl's own processes (workers, redis-server, site): "
            + ", ".join(f"{config} {cell([cores_used(r) for r in timed[config]])}"
                        for config in CONFIGS if timed.get(config))
            + ". A crawl at one core per worker is CPU-bound: its pages/s is the inverse of the "
            "CPU per page of those processes together, so there the pages/s ratio follows "
            "their CPU ratio "
            "(`benchmarks/pool.py` pools the per-round ratios of several runs).",
            "",
            "Pages per worker in the 2-worker crawls (ours / original): "
            + "; ".join(
                f"{'+'.join(map(str, a.get('responses_per_worker', [])))} / "
                f"{'+'.join(map(str, b.get('responses_per_worker', [])))}"
                for a, b in zip(timed["ours-2"], timed["original-2"], strict=False)
            ),
            "",
        ]
    lines += leases_report(data)
    if targets:
        lines += ["## Targets (ours / original)", ""]
        lines += [f"- {'✅ met' if met else '❌ not met'}: {text}" for text, met in targets]
        lines.append("")
    return "\n".join(lines), targets


def leases_report(data: dict[str, Any]) -> list[str]:
    """The "Cost of leases" section: ours with leases vs ours without."""
    sched = data.get("leases_scheduler")
    e2e = data.get("e2e")
    timed = e2e["timed"] if e2e else {}
    proxied = e2e["proxied"] if e2e else {}
    if not sched and "ours-unleased-1" not in timed:
        return []
    cfg = data["config"]
    lines = [
        "## Cost of leases: ours with leases vs ours without",
        "",
        "Without leases = the same code with `SCHEDULER_QUEUE_CLASS = "
        "unleased_queues.Unleased<queue>` (benchmarks/unleased_queues.py: `pop()` overridden, "
        "so the scheduler pops with a plain pop and records, acknowledges and renews no "
        "lease). Median (min–max) of the runs; ratio = with / without (< 1 for a rate: "
        "slower with leases; > 1 for a cost: more with leases).",
        "",
        "| measure | with leases | without leases | with / without |",
        "|---|---|---|---|",
    ]

    def row(title: str, with_: list[float], without: list[float]) -> None:
        if with_ and without:
            lines.append(f"| {title} | {cell(with_)} | {cell(without)} | "
                         f"{ratio(median(with_), median(without)):.2f}× |")

    if sched:
        for queue in QUEUES:
            for key, title in (
                ("enqueue_rate", "enqueue, new requests"),
                ("dequeue_ack_rate", "dequeue + ack (engine done with each request)"),
                ("dequeue_noack_rate", "dequeue, pop only (nothing acknowledged)"),
            ):
                row(f"scheduler {title}, {queue}, requests/s",
                    [r[key] for r in sched["ours"][queue]],
                    [r[key] for r in sched["ours-unleased"][queue]])

    def vals(key: str, metric: str) -> list[float]:
        return [r[metric] for r in timed.get(key, []) if metric in r]

    def pvals(key: str, metric: str) -> list[float]:
        return [r[metric] for r in proxied.get(key, []) if metric in r]

    proxy_pages = cfg.get("proxy_pages", cfg["pages"])
    proxy_site = f", {proxy_pages:,}-page site" if proxy_pages != cfg["pages"] else ""

    def plural(workers: int) -> str:
        return f"{workers} worker{'s' if workers > 1 else ''}"

    for workers in (1, 2):
        row(f"pages/s, {plural(workers)} (launch → last exit)",
            vals(f"ours-{workers}", "pages_per_s"), vals(f"ours-unleased-{workers}", "pages_per_s"))
    for workers in (1, 2):
        row(f"worker CPU ms/page, {plural(workers)}",
            vals(f"ours-{workers}", "worker_cpu_ms_per_page"),
            vals(f"ours-unleased-{workers}", "worker_cpu_ms_per_page"))
    for workers in (1, 2):
        rt = pvals(f"ours-{workers}", "round_trips_per_page")
        row(f"Redis round trips/page, {plural(workers)} (proxy count, {len(rt)} run"
            f"{'s' if len(rt) > 1 else ''}{proxy_site})",
            rt, pvals(f"ours-unleased-{workers}", "round_trips_per_page"))
    lines.append("")

    details_start = len(lines)
    lines += ["Details:", "", "| measure | with leases | without leases | with / without |",
              "|---|---|---|---|"]
    if sched:
        for queue in QUEUES:
            for key, title in (("enqueue_cpu_us", "enqueue"),
                               ("dequeue_ack_cpu_us", "dequeue + ack"),
                               ("dequeue_noack_cpu_us", "dequeue, pop only")):
                row(f"scheduler client CPU µs/request, {title}, {queue}",
                    [r[key] for r in sched["ours"][queue]],
                    [r[key] for r in sched["ours-unleased"][queue]])
    for workers in (1, 2):
        row(f"pages/s, {plural(workers)} (crawl phase: open → last response)",
            vals(f"ours-{workers}", "crawl_pages_per_s"),
            vals(f"ours-unleased-{workers}", "crawl_pages_per_s"))
    for workers in (1, 2):
        for metric, title in (("client_commands_per_page", "commands sent/page (a script call "
                               "= 1, proxy count)"),):
            row(f"{title}, {plural(workers)}", pvals(f"ours-{workers}", metric),
                pvals(f"ours-unleased-{workers}", metric))
        for metric, title in (("redis_commands_per_page", "Redis commands executed/page (INFO, "
                               "incl. inside scripts)"),
                              ("redis_cpu_ms_per_page", "redis-server CPU ms/page"),
                              ("tail_s", "seconds from last response to last exit")):
            row(f"{title}, {plural(workers)}", vals(f"ours-{workers}", metric),
                vals(f"ours-unleased-{workers}", metric))
    if len(lines) == details_start + 4:
        del lines[details_start:]
    else:
        lines.append("")
    if timed.get("ours-2") and timed.get("ours-unleased-2"):
        lines += [
            "Pages per worker in the 2-worker crawls (with / without leases): "
            + "; ".join(
                f"{'+'.join(map(str, a.get('responses_per_worker', [])))} / "
                f"{'+'.join(map(str, b.get('responses_per_worker', [])))}"
                for a, b in zip(timed["ours-2"], timed["ours-unleased-2"], strict=False)
            ),
            "",
        ]
    if cfg.get("leases_only") and timed:
        lines += [
            "Other processes on this shared machine used "
            + cell([r.get("foreign_cores", 0.0) for v in timed.values() for r in v])
            + " of the 2 cores during the timed crawls (median (min–max); a noise indicator)"
            + steal_note(timed) + ". "
            f"Site: {cfg['pages']:,} pages; scheduler: N = {cfg['n']:,}.",
            "",
        ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke check: N=2000, 1000 pages, 1 run, round trips for 1 worker")
    parser.add_argument("--leases-only", action="store_true",
                        help="only the cost of leases (ours with vs without; no original, no "
                        f"ceiling): N={LEASES_N}, {LEASES_PAGES} pages, 3 runs, 3 proxied runs on "
                        f"{LEASES_PROXY_PAGES} pages; "
                        "writes results/leases.md")
    parser.add_argument("--skip-leases", action="store_true",
                        help="full run without ours-without-leases")
    parser.add_argument("--runs", type=int, help="runs of each measurement (default 3)")
    parser.add_argument("--proxy-runs", type=int,
                        help="proxied crawls per package and worker count (default 1; "
                        "--leases-only: as --runs)")
    parser.add_argument("--proxy-pages", type=int,
                        help="site size of the proxied crawls (default: --pages; --leases-only: "
                        f"{LEASES_PROXY_PAGES})")
    parser.add_argument("--n", type=int, help="requests per scheduler phase (default 10000)")
    parser.add_argument("--pages", type=int, help="pages of the site (default 5000)")
    parser.add_argument("--skip-scheduler", action="store_true")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--output", type=Path,
                        help="default results/latest.md (--leases-only: results/leases.md)")
    parser.add_argument("--ours-src", type=Path, default=ROOT / "src",
                        help="the src/ folder holding our scrapy_redis (default: this checkout)")
    args = parser.parse_args()
    if args.leases_only and args.skip_leases:
        parser.error("--leases-only and --skip-leases exclude each other")
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
    proxy_workers = (1,) if args.quick else (1, 2)
    output = args.output or RESULTS / ("leases.md" if args.leases_only else "latest.md")
    if args.leases_only:
        modes: tuple[str, ...] = OURS_VARIANTS
    elif args.skip_leases:
        modes = ("ours", "original")
    else:
        modes = ("ours", "original", "ours-unleased")

    started = time.perf_counter()
    LOGS.mkdir(parents=True, exist_ok=True)
    original = None if args.leases_only else original_python()
    ours_source = snapshot_ours(args.ours_src.resolve())
    data: dict[str, Any] = {
        "ours_source": ours_source,
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "machine": machine(),
        "command": "python benchmarks/run.py " + " ".join(sys.argv[1:]),
        "config": {"runs": runs, "n": n, "pages": pages, "quick": args.quick,
                   "leases_only": args.leases_only, "proxy_runs": proxy_runs,
                   "proxy_pages": proxy_pages,
                   "modes": modes},
        "load_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "ours_version": subprocess.run(
            [sys.executable, "-c", "import scrapy_redis; print(scrapy_redis.__version__)"],
            capture_output=True, text=True, env=package_env("ours")).stdout.strip(),
        "original_version": "0.9.1",
    }
    redis = Redis()
    try:
        data["redis_version"] = redis.info("server")["redis_version"]
        if not args.skip_scheduler:
            if original is not None:
                data["scheduler"] = scheduler_benchmark(redis, original, n, runs)
            if "ours-unleased" in modes:
                data["leases_scheduler"] = lease_scheduler_benchmark(redis, n, runs)
        if not args.skip_e2e:
            data["e2e"] = e2e_benchmark(
                redis, original, pages, runs, proxy_workers, modes,
                ceiling=original is not None, proxy_runs=proxy_runs, proxy_pages=proxy_pages)
    finally:
        redis.stop()
        shutil.rmtree(OURS_SRC, ignore_errors=True)
    data["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    data["elapsed_s"] = time.perf_counter() - started
    text, targets = report(data)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    output.with_suffix(".json").write_text(json.dumps(data, indent=1, default=str))
    print(text)
    if targets:
        met = sum(1 for _, ok in targets if ok)
        print(f"{met} of {len(targets)} targets met.")
    print(f"Written to {output} ({data['elapsed_s'] / 60:.1f} min).")


if __name__ == "__main__":
    main()
