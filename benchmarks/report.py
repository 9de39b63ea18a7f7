"""The benchmark report (markdown) of one run's data, and the verdict on each target.

Sections, each present when the run measured it: the header, the scheduler
micro-benchmark, Redis memory, the end-to-end crawls and their notes, the cost
of leases (leases_report.py), and the list of targets (targets.py).
"""

from __future__ import annotations

from typing import Any

from _util import Crawls
from leases_report import leases_report
from pool import CONFIGS, cores_used
from report_format import (
    CRAWL_DETAILS,
    cell,
    fmt,
    foreign_note,
    median,
    pages_split,
    plural,
    ratio,
    row,
    times,
    values,
)
from sched_runner import QUEUES, Results
from targets import CPU, DEQUEUE, DUP_ENQUEUE, ENQUEUE, MEMORY, PAGES, ROUND_TRIPS, Target, Verdict

#: The scheduler rates table: (target, title of the row).
SCHED_RATES = (
    (ENQUEUE, "enqueue, new requests"),
    (DUP_ENQUEUE, "enqueue, 50% duplicates"),
    (DEQUEUE, "dequeue"),
)
#: The client CPU table: (key, title of the row).
SCHED_CPU = (
    ("enqueue_cpu_us", "enqueue, new"),
    ("dup_enqueue_cpu_us", "enqueue, 50% dup"),
    ("dequeue_cpu_us", "dequeue"),
)
WITH_TARGET = (
    "| measure | queue | ours | original | ours/original | target |",
    "|---|---|---|---|---|---|",
)


def header(data: dict[str, Any]) -> list[str]:
    """Title, date, machine, load, version of ours, command."""
    cfg = data["config"]
    ours = f"ours ({data['ours_version']})"
    if cfg.get("leases_only"):
        title = f"cost of leases in {ours}: with vs without"
    else:
        title = f"{ours} vs original (scrapy-redis {data['original_version']})"
    return [
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


def of(sched: Results, package: str, queue: str, key: str) -> list[float]:
    return [r[key] for r in sched[package][queue]]


def scheduler_section(sched: Results, n: int, verdicts: list[Verdict]) -> list[str]:
    """Rates (with their targets) and client CPU per operation, per queue class."""
    lines = [f"## Scheduler (N = {n:,} requests per phase; rates in requests/s)", ""]
    lines += WITH_TARGET
    for target, title in SCHED_RATES:
        for queue in QUEUES:
            ours, orig = (
                of(sched, "ours", queue, target.key),
                of(sched, "original", queue, target.key),
            )
            verdict = target.judge(queue, median(ours), median(orig))
            verdicts.append(verdict)
            lines.append(row(title, queue, cell(ours), cell(orig), verdict.shown, verdict.cell()))
    lines += [
        "",
        "Client CPU per operation (µs, median; the rest of the wall time is waiting for Redis):",
        "",
        "| operation | queue | ours | original | ours/original |",
        "|---|---|---|---|---|",
    ]
    for key, title in SCHED_CPU:
        for queue in QUEUES:
            ours_v = median(of(sched, "ours", queue, key))
            orig_v = median(of(sched, "original", queue, key))
            lines.append(row(title, queue, fmt(ours_v), fmt(orig_v), times(ours_v, orig_v)))
    return lines


def memory_section(sched: Results, verdicts: list[Verdict]) -> list[str]:
    """Bytes per queued request (with its target), used_memory, bytes per fingerprint."""
    lines = ["", "## Redis memory (bytes; MEMORY USAGE … SAMPLES 0 of the keys / N)", ""]
    lines += WITH_TARGET
    for queue in QUEUES:
        ours_v = median(of(sched, "ours", queue, MEMORY.key))
        orig_v = median(of(sched, "original", queue, MEMORY.key))
        verdict = MEMORY.judge(queue, ours_v, orig_v)
        verdicts.append(verdict)
        cells = (fmt(ours_v), fmt(orig_v), verdict.shown, verdict.cell())
        lines.append(row("per queued request", queue, *cells))
    for queue in QUEUES:
        ours_v = median(of(sched, "ours", queue, "used_memory_per_request"))
        orig_v = median(of(sched, "original", queue, "used_memory_per_request"))
        title = "INFO used_memory delta per request (queue + fingerprint)"
        lines.append(row(title, queue, fmt(ours_v), fmt(orig_v), times(ours_v, orig_v), ""))
    key = "df_bytes_per_fingerprint"
    ours_v = median([v for q in QUEUES for v in of(sched, "ours", q, key)])
    orig_v = median([v for q in QUEUES for v in of(sched, "original", q, key)])
    title = "per fingerprint (dupefilter set)"
    lines += [row(title, "all", fmt(ours_v), fmt(orig_v), times(ours_v, orig_v), ""), ""]
    return lines


def target_rows(timed: Crawls, target: Target, title: str, verdicts: list[Verdict]) -> list[str]:
    """One row per worker count of a measure with a target; ``title`` has ``{}`` for the
    worker count."""
    lines = []
    for workers in (1, 2):
        ours = values(timed, f"ours-{workers}", target.key)
        orig = values(timed, f"original-{workers}", target.key)
        verdict = target.judge(f"{workers} worker(s)", median(ours), median(orig))
        verdicts.append(verdict)
        cells = (cell(ours), cell(orig), verdict.shown, verdict.cell())
        lines.append(row(title.format(plural(workers)), *cells))
    return lines


def compare_row(crawls: Crawls, metric: str, title: str, workers: int) -> list[str]:
    """A row of ours against the original without a target, when both measured it."""
    ours = values(crawls, f"ours-{workers}", metric)
    orig = values(crawls, f"original-{workers}", metric)
    if not (ours and orig):
        return []
    return [row(title, cell(ours), cell(orig), times(median(ours), median(orig)), "")]


def round_trip_rows(proxied: Crawls, verdicts: list[Verdict]) -> list[str]:
    """Round trips (with their target) and commands sent, per proxied worker count."""
    lines = []
    for workers in sorted({int(k.rsplit("-", 1)[1]) for k in proxied}):
        ours_r, orig_r = proxied[f"ours-{workers}"], proxied[f"original-{workers}"]
        ours = [r[ROUND_TRIPS.key] for r in ours_r]
        orig = [r[ROUND_TRIPS.key] for r in orig_r]
        verdict = ROUND_TRIPS.judge(f"{workers} worker(s)", median(ours), median(orig))
        verdicts.append(verdict)
        runs = f"{len(ours_r)} run{'s' if len(ours_r) > 1 else ''}"
        title = f"Redis round trips/page, {plural(workers)} (proxy count, {runs})"
        rt = times(median(ours), median(orig))
        lines.append(row(title, cell(ours), cell(orig), rt, verdict.cell()))
        sent = median([r["client_commands_per_page"] for r in ours_r])
        sent_orig = median([r["client_commands_per_page"] for r in orig_r])
        title = f"commands sent/page, {plural(workers)} (a script call = 1)"
        lines.append(row(title, fmt(sent), fmt(sent_orig), times(sent, sent_orig), ""))
    return lines


def e2e_section(e2e: dict[str, Any], pages: int, verdicts: list[Verdict]) -> list[str]:
    """The table of the crawls: ours against the original."""
    timed = e2e["timed"]
    lines = [
        f"## End to end: crawl of a local site of {pages:,} pages (~10 links each), "
        "CONCURRENT_REQUESTS 16",
        "",
        "| measure | ours | original | ours/original | target |",
        "|---|---|---|---|---|",
    ]
    lines += target_rows(timed, PAGES, "pages/s, {} (launch → last exit)", verdicts)
    for workers in (1, 2):
        title = f"pages/s, {plural(workers)} (crawl phase: open → last response)"
        lines += compare_row(timed, "crawl_pages_per_s", title, workers)
    lines += target_rows(timed, CPU, "worker CPU ms/page, {}", verdicts)
    lines += round_trip_rows(e2e["proxied"], verdicts)
    for workers in (1, 2):
        for metric, title in CRAWL_DETAILS:
            lines += compare_row(timed, metric, f"{title}, {plural(workers)}", workers)
    return lines


def ceiling_by_run(ours: list[float], original: list[float], memory: list[float]) -> list[str]:
    """Each run's 1-worker crawls against the ceiling crawled in the same run, minutes
    apart: how fast the machine was then falls on all three alike."""
    if not (len(ours) == len(original) == len(memory)) or not memory:
        return []
    over = [m / g for g, m in zip(original, memory, strict=True)]
    return [
        "Per run, pages/s as a fraction of that run's ceiling: ours "
        + ", ".join(f"{o / m:.2f}" for o, m in zip(ours, memory, strict=True))
        + "; the original "
        + ", ".join(f"{g / m:.2f}" for g, m in zip(original, memory, strict=True))
        + ". The ceiling over the original, the most a scheduler as fast as Scrapy's own "
        "could score: "
        + ", ".join(f"{x:.2f}×" for x in over)
        + f" (median {median(over):.2f}×).  ",
    ]


def ceiling_notes(timed: Crawls) -> list[str]:
    """Scrapy's in-memory scheduler (the ceiling) against both packages."""
    memory = values(timed, "memory-1", "pages_per_s")
    memory_cpu = values(timed, "memory-1", "worker_cpu_ms_per_page")
    ours = values(timed, "ours-1", "pages_per_s")
    orig = values(timed, "original-1", "pages_per_s")
    return [
        f"Ceiling — Scrapy's own in-memory scheduler and dupefilter, 1 worker: "
        f"**{cell(memory)} pages/s**, {cell(memory_cpu)} worker CPU ms/page "
        f"(ours reaches {ratio(median(ours), median(memory)):.2f}× of it, the original "
        f"{ratio(median(orig), median(memory)):.2f}×).  ",
        *ceiling_by_run(ours, orig, memory),
    ]


def e2e_notes(e2e: dict[str, Any]) -> list[str]:
    """Below the crawls' table: ceiling, site, noise, cores busy, pages per worker."""
    timed, site = e2e["timed"], e2e["site"]
    site_cpu = median([r["site_cpu_ms_per_page"] for v in timed.values() for r in v])
    busy = ", ".join(
        f"{config} {cell([cores_used(r) for r in timed[config]])}"
        for config in CONFIGS
        if timed.get(config)
    )
    return [
        "",
        *ceiling_notes(timed),
        f"Site raw throughput (asyncio keep-alive client, 32 connections, "
        f"{site['requests']:,} requests): **{fmt(site['rps'])} requests/s**, "
        f"{site['site_cpu_us_per_request']:.0f} µs site CPU per request; during the "
        f"crawls the site used {site_cpu:.3f} CPU ms per page.",
        "",
        foreign_note(timed) + ".",
        "",
        f"Cores kept busy by each crawl's own processes (workers, redis-server, site): {busy}. "
        "A crawl at one core per worker is CPU-bound: its pages/s is the inverse of the "
        "CPU per page of those processes together, so there the pages/s ratio follows "
        "their CPU ratio (`benchmarks/pool.py` pools the per-round ratios of several runs).",
        "",
        pages_split("ours / original", timed["ours-2"], timed["original-2"]),
        "",
    ]


def targets_section(verdicts: list[Verdict]) -> list[str]:
    if not verdicts:
        return []
    return ["## Targets (ours / original)", "", *(v.line() for v in verdicts), ""]


def report(data: dict[str, Any]) -> tuple[str, list[Verdict]]:
    """The report of a run's ``data`` (what run.py writes to the JSON file)."""
    verdicts: list[Verdict] = []
    lines = header(data)
    if "scheduler" in data:
        lines += scheduler_section(data["scheduler"], data["config"]["n"], verdicts)
        lines += memory_section(data["scheduler"], verdicts)
    if "e2e" in data and "original-1" in data["e2e"]["timed"]:
        lines += e2e_section(data["e2e"], data["config"]["pages"], verdicts)
        lines += e2e_notes(data["e2e"])
    lines += leases_report(data)
    lines += targets_section(verdicts)
    return "\n".join(lines), verdicts
