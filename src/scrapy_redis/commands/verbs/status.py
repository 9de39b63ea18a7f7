"""Show what Redis holds of a spider's crawl (every spider of the project without SPIDER).

Per spider: the requests queued (per priority for the PriorityQueue) and leased (per
worker; those under expired leases are their dead workers'), the start messages
pending and leased, the entries set aside (invalid, dead letters), the fingerprints,
the items, the workers with their last heartbeat and pages per second, and one line
of diagnosis when workers idle while work exists. Read from
:func:`scrapy_redis.status.crawl_status`: nothing is written. ``--json``:
``{"spiders": [...]}``, each as :meth:`~scrapy_redis.status.CrawlStatus.to_json`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_redis.politeness.report import render_slot
from scrapy_redis.status import crawl_status

if TYPE_CHECKING:
    import argparse

    from scrapy_redis.commands.context import Context
    from scrapy_redis.status import CrawlStatus, WorkerStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spider", nargs="?", metavar="SPIDER", help="one spider (default: all)")


def run(args: argparse.Namespace, context: Context) -> int:
    statuses = read_statuses(context, args.spider)
    if args.json:
        context.json({"spiders": [status.to_json() for status in statuses]})
    else:
        context.write("\n\n".join("\n".join(render(status)) for status in statuses))
    return 0


def read_statuses(context: Context, spider: str | None) -> list[CrawlStatus]:
    """The status of ``spider``, or of every spider of the project."""
    servers = context.spider_servers()
    names = [spider] if spider is not None else context.spider_names()
    classes = [context.spider_class(name) for name in names]
    return [crawl_status(servers.of(cls), context.settings, cls) for cls in classes]


def render(status: CrawlStatus) -> list[str]:
    """The status of one crawl as lines of text."""
    lanes = f", {status.lanes} lanes" if status.lanes > 1 else ""
    lines = [f"{status.spider} ({status.queue_class} {status.queue_key}{lanes})"]
    expired = f" ({status.expired_leases:,} leases expired)" if status.expired_leases else ""
    lines.append(f"  queue        {status.queued:,} queued, {status.leased:,} leased{expired}")
    if status.queued_by_priority:
        shown = ", ".join(f"{p}: {n:,}" for p, n in list(status.queued_by_priority.items())[:8])
        more = ", ..." if len(status.queued_by_priority) > 8 else ""
        lines.append(f"  priorities   {shown}{more}")
    lines.append(f"  set aside    {status.invalid:,} invalid, {status.dead_letters:,} dead letters")
    if status.start_keys:
        lines.append(
            f"  start        {', '.join(status.start_keys)}: {status.start_pending:,} pending, "
            f"{status.start_leased:,} leased, {status.start_invalid:,} invalid"
        )
    lines += [f"  slot         {render_slot(view)}" for view in status.slots[:5]]
    lines.append(f"  fingerprints {_count(status.fingerprints)}")
    lines.append(f"  items        {_count(status.items)}")
    lines.append(f"  workers      {status.workers_alive} alive{_fleet_rate(status)}")
    lines += [f"    {_worker_line(worker)}" for worker in status.workers]
    if status.diagnosis:
        lines.append(f"  diagnosis    {status.diagnosis}")
    return lines


def _count(value: int | None) -> str:
    return "unknown" if value is None else f"{value:,}"


def _fleet_rate(status: CrawlStatus) -> str:
    rates = [w.pages_per_second for w in status.workers if w.alive and w.pages_per_second]
    return f", {sum(rates):.1f} pages/s" if rates else ""


def _worker_line(worker: WorkerStatus) -> str:
    state = "alive" if worker.alive else "gone "
    age = "never" if worker.heartbeat_age is None else f"{worker.heartbeat_age:.1f}s ago"
    rate = "" if worker.pages_per_second is None else f", {worker.pages_per_second:.1f} pages/s"
    start = f", {worker.start_leased} start messages" if worker.start_leased else ""
    return f"{worker.id}  {state}  heartbeat {age}, {worker.leased} leased{start}{rate}"
