"""Show what Redis holds of a spider's crawl (every spider of the project without SPIDER).

Per spider: the requests queued (per priority for the PriorityQueue) and leased (per
worker; those under expired leases are their dead workers'), the start messages
pending and leased, the entries set aside (invalid, dead letters), the fingerprints
(those that expire, with DUPEFILTER_LIFETIME), the requests due later,
the items, the workers with their last heartbeat and pages per second, and one line
of diagnosis when workers idle while work exists, the recurring start messages with
their next run and interval (``scrapy redis push --every``), and the Redis it was read
from. What
cannot be read (a key of another type, a value no worker writes) is listed as
unreadable, naming the key and what it holds; the rest is shown. Read from
:func:`scrapy_redis.fleet.status.crawl_status`: nothing is written. ``--json``:
``{"spiders": [...]}``, each as :meth:`~scrapy_redis.fleet.status.CrawlStatus.to_json`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from redis.exceptions import NoPermissionError, ResponseError

from scrapy_redis.exceptions import ScrapyRedisError
from scrapy_redis.fleet.later import render_due, render_expiring
from scrapy_redis.fleet.status import crawl_status, unreadable_status
from scrapy_redis.politeness.report import render_slot
from scrapy_redis.store.redis_values import printable

if TYPE_CHECKING:
    import argparse

    from scrapy_redis.commands.context import Context
    from scrapy_redis.fleet.status import CrawlStatus, WorkerStatus


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
    """The status of ``spider``, or of every spider of the project (a crawl that cannot
    be read at all is shown as unreadable, the others all the same)."""
    servers = context.spider_servers()
    names = [spider] if spider is not None else context.spider_names()
    classes = [context.spider_class(name) for name in names]
    return [_status(servers.of(cls), context, cls) for cls in classes]


def _status(server: Any, context: Context, spidercls: type) -> CrawlStatus:
    try:
        return crawl_status(server, context.settings, spidercls)
    except NoPermissionError:
        raise  # the ACL user's, not the crawl's: the command names what to grant
    except (ScrapyRedisError, ResponseError) as exc:
        problem = getattr(exc, "detail", None) or printable(exc)
        return unreadable_status(spidercls.name, server, problem)  # type: ignore[attr-defined]


def render(status: CrawlStatus) -> list[str]:
    """The status of one crawl as lines of text (every value read from Redis made
    printable: a worker id may hold terminal escapes)."""
    return [printable(line) for line in _lines(status)]


def _lines(status: CrawlStatus) -> list[str]:
    lanes = f", {status.lanes} lanes" if status.lanes > 1 else ""
    lines = [f"{status.spider} ({status.queue_class} {status.queue_key}{lanes}) in {status.server}"]
    if status.lanes:
        lines += _queue_lines(status)
    else:
        lines.append("  queue        unreadable (below)")
    lines += _other_lines(status)
    lines += [f"  unreadable   {problem}" for problem in status.unreadable]
    if status.diagnosis:
        lines.append(f"  diagnosis    {status.diagnosis}")
    return lines


def _queue_lines(status: CrawlStatus) -> list[str]:
    expired = status.expired_leases
    of_dead = f" ({expired:,} of them by workers gone: lease expired)" if expired else ""
    lines = [f"  queue        {status.queued:,} queued, {status.leased:,} leased{of_dead}"]
    if status.queued_by_priority:
        shown = ", ".join(f"{p}: {n:,}" for p, n in list(status.queued_by_priority.items())[:8])
        more = ", ..." if len(status.queued_by_priority) > 8 else ""
        lines.append(f"  priorities   {shown}{more}")
    lines.append(f"  set aside    {status.invalid:,} invalid, {status.dead_letters:,} dead letters")
    lines.append(f"  fingerprints {_count(status.fingerprints)}")
    lines += _later_lines(status)
    return lines


def _later_lines(status: CrawlStatus) -> list[str]:
    """Requests due later and fingerprints that expire (fleet/later.py)."""
    lines = []
    if status.due_later is not None:
        lines.append(f"  due later    {render_due(status.due_later)}")
    if status.expiring is not None:
        first, *more = render_expiring(status.expiring)
        lines.append(f"  expiring     {first}")
        lines += [f"    {line}" for line in more]
    return lines


def _other_lines(status: CrawlStatus) -> list[str]:
    lines = []
    if status.start_keys:
        set_aside = f" ({status.start_set_aside:,} set aside)" if status.start_set_aside else ""
        lines.append(
            f"  start        {', '.join(status.start_keys)}: {status.start_pending:,} pending, "
            f"{status.start_leased:,} leased, {status.start_invalid:,} invalid{set_aside}"
        )
    lines += _recurring_lines(status)
    lines += [f"  slot         {render_slot(view)}" for view in status.slots[:5]]
    lines.append(f"  items        {_count(status.items)}")
    lines.append(f"  workers      {status.workers_alive} alive{_fleet_rate(status)}")
    lines += [f"    {_worker_line(worker)}" for worker in status.workers]
    return lines


def _recurring_lines(status: CrawlStatus) -> list[str]:
    """The recurring start messages, next due first (``scrapy redis push --cancel``
    stops one)."""
    if not status.recurring:
        return []
    more = ", the first ones" if len(status.recurring_next) < status.recurring else ""
    lines = [f"  recurring    {status.recurring:,} (next run first{more})"]
    for one in status.recurring_next:
        due = None if one["next_run"] is None else one["next_run"] - status.read_at
        when = "due now" if due is not None and due <= 0 else f"in {_duration(due)}"
        lines.append(f"    {when:<12} every {_duration(one['every']):<6} {one['message']}")
    return lines


def _duration(seconds: float | None) -> str:
    """``90`` as ``1m30s``, ``3600`` as ``1h``: the units ``push --every`` takes (``?``:
    not a number of seconds, written by hand)."""
    if seconds is None:
        return "?"
    whole, parts = round(seconds), []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
    if whole or not parts:
        parts.append(f"{whole}s")
    return "".join(parts)


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
