"""The "Cost of leases" section of the report: ours with leases against ours without.

"Without leases" is ours with ``SCHEDULER_QUEUE_CLASS =
unleased_queues.Unleased<queue>``: the scheduler micro-benchmark (sched_bench.py
--paired) and the crawls of the ``ours-unleased`` mode.
"""

from __future__ import annotations

from typing import Any

from _util import Crawls
from report_format import (
    CRAWL_DETAILS,
    cell,
    foreign_note,
    median,
    pages_split,
    plural,
    row,
    times,
    values,
)
from sched_runner import QUEUES

INTRO = (
    "Without leases = the same code with `SCHEDULER_QUEUE_CLASS = "
    "unleased_queues.Unleased<queue>` (benchmarks/unleased_queues.py: `pop()` overridden, "
    "so the scheduler pops with a plain pop and records, acknowledges and renews no "
    "lease). Median (min–max) of the runs; ratio = with / without (< 1 for a rate: "
    "slower with leases; > 1 for a cost: more with leases)."
)
HEADER = ("| measure | with leases | without leases | with / without |", "|---|---|---|---|")
#: The scheduler's rates: (key, title).
RATES = (
    ("enqueue_rate", "enqueue, new requests"),
    ("dequeue_ack_rate", "dequeue + ack (engine done with each request)"),
    ("dequeue_noack_rate", "dequeue, pop only (nothing acknowledged)"),
)
#: The scheduler's client CPU per request: (key, title).
CPU = (
    ("enqueue_cpu_us", "enqueue"),
    ("dequeue_ack_cpu_us", "dequeue + ack"),
    ("dequeue_noack_cpu_us", "dequeue, pop only"),
)


def pair_row(title: str, with_: list[float], without: list[float]) -> list[str]:
    """A row with leases against without, when both were measured."""
    if not (with_ and without):
        return []
    return [row(title, cell(with_), cell(without), times(median(with_), median(without)))]


def variant_row(crawls: Crawls, metric: str, title: str, workers: int) -> list[str]:
    """A row of the crawls of ``workers`` workers, with leases against without."""
    with_ = values(crawls, f"ours-{workers}", metric)
    return pair_row(title, with_, values(crawls, f"ours-unleased-{workers}", metric))


def sched_rows(
    sched: dict[str, Any] | None, specs: tuple[tuple[str, str], ...], template: str
) -> list[str]:
    """Rows of the scheduler micro-benchmark; ``template`` names ``{title}`` and ``{queue}``."""
    lines: list[str] = []
    for queue in QUEUES if sched else ():
        for key, title in specs:
            lines += pair_row(
                template.format(title=title, queue=queue),
                [r[key] for r in sched["ours"][queue]],
                [r[key] for r in sched["ours-unleased"][queue]],
            )
    return lines


def crawl_rows(timed: Crawls, proxied: Crawls, cfg: dict[str, Any]) -> list[str]:
    """The main table's crawl rows: pages/s, worker CPU, round trips."""
    lines: list[str] = []
    for workers in (1, 2):
        title = f"pages/s, {plural(workers)} (launch → last exit)"
        lines += variant_row(timed, "pages_per_s", title, workers)
    for workers in (1, 2):
        title = f"worker CPU ms/page, {plural(workers)}"
        lines += variant_row(timed, "worker_cpu_ms_per_page", title, workers)
    proxy_pages = cfg.get("proxy_pages", cfg["pages"])
    proxy_site = f", {proxy_pages:,}-page site" if proxy_pages != cfg["pages"] else ""
    for workers in (1, 2):
        runs = len(values(proxied, f"ours-{workers}", "round_trips_per_page"))
        counted = f"proxy count, {runs} run{'s' if runs > 1 else ''}{proxy_site}"
        title = f"Redis round trips/page, {plural(workers)} ({counted})"
        lines += variant_row(proxied, "round_trips_per_page", title, workers)
    return lines


def detail_rows(sched: dict[str, Any] | None, timed: Crawls, proxied: Crawls) -> list[str]:
    """The details table's rows: client CPU, crawl phase, commands, redis-server, tail."""
    template = "scheduler client CPU µs/request, {title}, {queue}"
    lines = sched_rows(sched, CPU, template)
    for workers in (1, 2):
        title = f"pages/s, {plural(workers)} (crawl phase: open → last response)"
        lines += variant_row(timed, "crawl_pages_per_s", title, workers)
    for workers in (1, 2):
        title = f"commands sent/page (a script call = 1, proxy count), {plural(workers)}"
        lines += variant_row(proxied, "client_commands_per_page", title, workers)
        for metric, title in CRAWL_DETAILS:
            lines += variant_row(timed, metric, f"{title}, {plural(workers)}", workers)
    return lines


def leases_report(data: dict[str, Any]) -> list[str]:
    """The "Cost of leases" section, when the run measured ours without leases."""
    sched = data.get("leases_scheduler")
    e2e = data.get("e2e")
    timed: Crawls = e2e["timed"] if e2e else {}
    proxied: Crawls = e2e["proxied"] if e2e else {}
    if not sched and "ours-unleased-1" not in timed:
        return []
    cfg = data["config"]
    lines = ["## Cost of leases: ours with leases vs ours without", "", INTRO, "", *HEADER]
    lines += sched_rows(sched, RATES, "scheduler {title}, {queue}, requests/s")
    lines += [*crawl_rows(timed, proxied, cfg), ""]
    details = detail_rows(sched, timed, proxied)
    if details:
        lines += ["Details:", "", *HEADER, *details, ""]
    if timed.get("ours-2") and timed.get("ours-unleased-2"):
        split = pages_split("with / without leases", timed["ours-2"], timed["ours-unleased-2"])
        lines += [split, ""]
    if cfg.get("leases_only") and timed:
        sizes = f"Site: {cfg['pages']:,} pages; scheduler: N = {cfg['n']:,}."
        lines += [f"{foreign_note(timed)}. {sizes}", ""]
    return lines
