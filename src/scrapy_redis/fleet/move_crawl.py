"""Move a stopped crawl from one Redis to another (to a Redis Cluster, into lanes).

On a cluster the scheduler splits a crawl into lanes (SCHEDULER_SHARDS, see
:mod:`scrapy_redis.scheduling.lanes`), so a crawl kept on one Redis (SCHEDULER_PERSIST)
cannot be copied key for key: its requests and fingerprints go to the lane each
request's fingerprint picks. Stop the workers (their leased requests go back to
the queue), then, from the Scrapy project's directory, with the target's
settings (REDIS_URL = the new server, or ``--to``)::

    python -m scrapy_redis.move_crawl SPIDER --from redis://old:6379 [--to URL] [-s NAME=VALUE]

What moves:

* the queued requests: leased from the source in batches (so that a move that
  stops half-way loses nothing: the batch it held comes back to the source when
  its lease expires), pushed into the target's lanes, then released; the target
  marks the entries of a batch not yet released (``lua/move_push.lua``), so that a
  move run again after a stop pushes none of them twice;
* the requests due later (``<queue>:due``, see scheduling/due.py), in batches too: each
  due after the time it had left on the source, by the target's clock (the same time
  when the two servers' clocks agree), into the target's requests due later (per
  slot's lane with SCHEDULER_FLEET_LIMITS); pushed before they are removed from the
  source, and marked on the target until then (``lua/move_due_push.lua``), so that a
  move stopped half-way and run again pushes none twice;
* the fingerprints of the default filter's set, into the target's filter (any
  DUPEFILTER_CLASS of scrapy-redis; into every lane of a target split into lanes with
  SCHEDULER_FLEET_LIMITS, where a fingerprint is kept in its request's slot's lane,
  which the fingerprint alone does not tell); a lean or Bloom filter cannot list its
  fingerprints: moving such a crawl is refused unless ``--without-fingerprints``
  (then pages already crawled may be crawled again);
* the start key (REDIS_START_URLS_KEY), the items list (REDIS_ITEMS_KEY) and the
  stats hash (STATS_KEY), which keep their names: copied with DUMP and RESTORE; so are
  the recurring start messages (``<start key>:recurring`` and ``:recurring:every``,
  named as the target names them: ``{<start key>}:recurring`` on a Redis Cluster), each
  due at the same time of the target's clock.

The source keys are deleted only with ``--delete-source``. The move is refused
while workers use the source crawl, while requests are leased there by workers
that may still be alive, and when the target crawl has data (``--force`` merges), or
has one of the keys that keep their names: all checked before anything moves.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from scrapy_redis.connection import is_cluster
from scrapy_redis.dupefilters.migrate import project_settings, record_batch, source_batches
from scrapy_redis.exceptions import ConfigurationError
from scrapy_redis.fleet.move_keys import (
    MoveRefusedError,
    check_renamed_keys,
    copy_renamed_keys,
    named_keys,
    recurring_keys,
)
from scrapy_redis.queue import Candidate, Entry, FifoQueue, LifoQueue, PriorityQueue
from scrapy_redis.queues.leases import LeaseBook
from scrapy_redis.scheduling.due import DueRequests, due_requests
from scrapy_redis.scheduling.lanes import LanedQueue, lane_of
from scrapy_redis.store.keys import due_key, moving_key, priority_list_key, workers_key
from scrapy_redis.store.scripts import script

logger = logging.getLogger(__name__)

#: Requests leased from the source and pushed into the target per step.
BATCH = 500


@dataclass
class Moved:
    """What a move did."""

    requests: int = 0
    #: Of those, the requests due later.
    due: int = 0
    fingerprints: int = 0
    keys: list[str] = field(default_factory=list)


def move(source: Any, target: Any, *, fingerprints: bool = True, force: bool = False) -> Moved:
    """Move the crawl of the opened scheduler ``source`` into the opened scheduler
    ``target`` (same spider; see the module's doc)."""
    check_movable(source, target, fingerprints, force)
    moved = Moved()
    if fingerprints:
        moved.fingerprints = move_fingerprints(source, target)
    moved.due = move_due(source, target)
    moved.requests = moved.due + move_requests(source, target)
    return moved


def check_movable(source: Any, target: Any, fingerprints: bool, force: bool) -> None:
    """:class:`MoveRefusedError` naming why ``source`` cannot be moved into ``target``."""
    if isinstance(source.queue, LanedQueue):
        raise MoveRefusedError(
            "The source crawl is split into lanes: this command moves a crawl of one queue "
            "and one filter (SCHEDULER_SHARDS = 1)."
        )
    due = due_key(source.queue.key, is_cluster(source.server))
    if (waiting := source.server.zcard(due)) and _target_due(target) is None:
        raise MoveRefusedError(
            f"{waiting} requests of the source crawl are due later ({due}), but the "
            "target's SCHEDULER_QUEUE_CLASS keeps none (use one of scrapy_redis.queue's), "
            "or purge them (scrapy redis purge SPIDER --queue), then move again."
        )
    registry = workers_key(source.queue.key, is_cluster(source.server))
    others = [
        worker
        for worker in source.server.hkeys(registry)
        if worker.decode() not in (source.worker_id, "~flushing")
    ]
    if others:
        raise MoveRefusedError(
            f"{len(others)} worker(s) use the source crawl ({registry}): stop them first "
            "(with SCHEDULER_PERSIST the crawl is kept), or wait SCHEDULER_WORKER_TIMEOUT."
        )
    kind = source.server.type(source.df.key).decode()
    listed = kind == "set" or (kind == "none" and not _count(source.df))
    if fingerprints and not listed:
        raise MoveRefusedError(
            f"The source's {type(source.df).__name__} cannot list its fingerprints: move "
            "with --without-fingerprints (pages crawled already may be crawled again)."
        )
    if not force and (len(target.queue) or _target_fingerprints(target)):
        raise MoveRefusedError(
            "The target crawl has requests or fingerprints already: --force merges into it."
        )


def _target_fingerprints(target: Any) -> int:
    filters = getattr(target.queue, "filters", None) or [target.df]
    return sum(_count(dupefilter) for dupefilter in filters)


def _count(dupefilter: Any) -> int:
    if hasattr(dupefilter, "count"):
        return int(dupefilter.count())
    return int(dupefilter.server.scard(dupefilter.key))


def move_fingerprints(source: Any, target: Any) -> int:
    """Copy the source set's fingerprints into the target's filter (lane by lane)."""
    filters = getattr(target.queue, "filters", None) or [target.df]
    lanes = getattr(target.queue, "lanes", None) or [target.queue]
    # Queued per download slot, a split crawl keeps a fingerprint in its slot's lane,
    # which a fingerprint alone does not tell: it goes into every lane.
    everywhere = len(filters) > 1 and getattr(lanes[0], "paced_by_the_fleet", False)
    copied = 0
    for batch in source_batches(source.server, source.df.key, 1000):
        groups: dict[int, list[str]] = {}
        for fingerprint in batch:
            for lane in _fingerprint_lanes(fingerprint, len(filters), everywhere):
                groups.setdefault(lane, []).append(fingerprint)
        for lane, fingerprints in groups.items():
            record_batch(target.server, filters[lane], fingerprints)
        copied += len(batch)
    return copied


def _fingerprint_lanes(fingerprint: str, lanes: int, everywhere: bool) -> range:
    if everywhere:
        return range(lanes)
    lane = lane_of(Candidate(fingerprint, None), lanes)
    return range(lane, lane + 1)


def move_requests(source: Any, target: Any) -> int:
    """Lease the source's requests a batch at a time, push each into its target lanes,
    release the batch, then confirm it on the target: what a move that stops half-way
    held comes back to the source, and is not pushed twice when the move is run again
    (``lua/move_push.lua``). How many requests were pushed."""
    book = LeaseBook(source.server, source.queue.key, source.worker_id, source.worker_timeout)
    book.recover_expired()  # leased by workers that died: queued again
    if book.count_all():
        raise MoveRefusedError(
            f"{book.count_all()} batches of requests are leased by workers that may still "
            "run: stop them, or wait SCHEDULER_WORKER_TIMEOUT, and move again."
        )
    lanes = getattr(target.queue, "lanes", None) or [target.queue]
    if hasattr(source.queue, "drain"):  # per-slot queues: every request, whatever its limits
        source.queue.drain = True
    moved = 0
    while True:
        ticket = book.ticket()
        entries = source.queue.pop_entries(BATCH, ticket=ticket)
        lease = book.taken_batch(ticket, len(entries))
        if lease is None:
            break
        groups: dict[int, list[Entry]] = {}
        for entry in entries:
            lane = lane_of(Candidate(_fingerprint(source, entry), entry), len(lanes))
            groups.setdefault(lane, []).append(entry)
        moved += sum(push_once(lanes[lane], group) for lane, group in groups.items())
        book.release([(lease, list(range(1, len(entries) + 1)))])
        for lane, group in groups.items():
            _confirm(lanes[lane], group)
    cluster = is_cluster(target.server)
    target.server.unlink(*(moving_key(lane.key, cluster) for lane in lanes))
    return moved


def _target_due(target: Any) -> DueRequests | None:
    """Where the target keeps requests due later (None: its queue class keeps none)."""
    return due_requests(target.queue, target.df, "", lambda: 0.0)


def move_due(source: Any, target: Any) -> int:
    """Move the source's requests due later into the target's, a batch at a time: each
    batch pushed (marked on the target), removed from the source, then confirmed; how
    many were pushed."""
    due = _target_due(target)
    key = due_key(source.queue.key, is_cluster(source.server))
    if due is None or not source.server.exists(key):
        return 0
    moved = 0
    while batch := source.server.zrange(key, 0, BATCH - 1, withscores=True):
        seconds, micros = source.server.time()
        now_ms = seconds * 1000 + micros // 1000
        groups: dict[int, list[Any]] = {}
        for member, score in batch:
            left = min(max(0.0, score - now_ms), 1e15)  # (+inf: never due, kept so)
            groups.setdefault(due.lane_of_member(member), []).extend([int(left), member])
        for lane, args in groups.items():
            keys = [moving_key(due.queues[lane].key, is_cluster(target.server)), due.keys[lane]]
            moved += int(script("move_due_push")(target.server, keys, args))
        source.server.zrem(key, *(member for member, _ in batch))
        for lane, args in groups.items():
            queue = due.queues[lane]
            digests = [hashlib.sha1(member).hexdigest() for member in args[1::2]]
            keys = [moving_key(queue.key, is_cluster(queue.server))]
            script("move_confirm")(queue.server, keys, digests)
    return moved


def push_once(queue: Any, entries: list[Entry]) -> int:
    """Push ``entries`` into ``queue`` but those pushed by a batch not confirmed released
    on the source (``lua/move_push.lua``); how many were pushed."""
    cluster = is_cluster(queue.server)
    keys = [moving_key(queue.key, cluster), queue.key]
    prio = isinstance(queue, PriorityQueue)
    if not prio and not isinstance(queue, (FifoQueue, LifoQueue)):
        queue.push_entries(entries)  # a queue class of its own: pushed as it pushes
        return len(entries)
    args: list[Any] = ["prio" if prio else "list"]
    for entry in entries:
        number = 2
        if prio:
            keys.append(priority_list_key(queue.key, entry.priority, cluster))
            number = len(keys)
        args += [number, entry.priority, entry.data]
    return int(script("move_push")(queue.server, keys, args))


def _confirm(queue: Any, entries: list[Entry]) -> None:
    """The batch of ``entries`` is released on the source (``lua/move_confirm.lua``)."""
    if isinstance(queue, (PriorityQueue, FifoQueue, LifoQueue)):
        digests = [hashlib.sha1(entry.data).hexdigest() for entry in entries]
        script("move_confirm")(
            queue.server, [moving_key(queue.key, is_cluster(queue.server))], digests
        )


def _fingerprint(scheduler: Any, entry: Entry) -> str | None:
    request = scheduler.queue.decode(entry)
    return None if request.dont_filter else str(scheduler.df.request_fingerprint(request))


def _scheduler(spider_name: str, settings: Any) -> Any:
    """The project's scheduler for SPIDER on ``settings``, opened (it joins the crawl's
    registry; its timers never run: no reactor runs here)."""
    from scrapy import Spider
    from scrapy.settings import SETTINGS_PRIORITIES
    from scrapy.utils.misc import build_from_crawler
    from scrapy.utils.test import get_crawler

    from scrapy_redis.scheduler import Scheduler

    spidercls = type("MovedSpider", (Spider,), {"name": spider_name})
    chosen = {  # what the project or the command line set (Scrapy's defaults stay defaults)
        name: settings[name]
        for name in settings
        if (settings.getpriority(name) or 0) > SETTINGS_PRIORITIES["default"]
    }
    # never delete what is moved (nor where it goes), whatever the project says
    keep = {"SCHEDULER_PERSIST": True, "SCHEDULER_FLUSH_ON_START": False}
    crawler = get_crawler(spidercls, {**chosen, **keep})
    spider = crawler.spidercls.from_crawler(crawler)
    crawler.spider = spider
    scheduler = build_from_crawler(Scheduler, crawler)
    scheduler.open(spider)
    return scheduler


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spider", help="the spider name (formats the key templates)")
    parser.add_argument("--from", dest="source", required=True, help="the source REDIS_URL")
    parser.add_argument("--to", dest="target", help="the target REDIS_URL (default: settings)")
    parser.add_argument("--without-fingerprints", action="store_true")
    parser.add_argument("--delete-source", action="store_true")
    parser.add_argument("--force", action="store_true")
    parser.add_argument("-s", dest="set", action="append", default=[], metavar="NAME=VALUE")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    settings = project_settings(args.set)
    target_settings = settings.copy()
    if args.target:
        target_settings.set("REDIS_URL", args.target, priority="cmdline")
    source_settings = settings.copy()
    source_settings.set("REDIS_URL", args.source, priority="cmdline")
    source_settings.set("SCHEDULER_SHARDS", 1, priority="cmdline")
    source = _scheduler(args.spider, source_settings)
    try:
        target = _scheduler(args.spider, target_settings)
    except Exception:
        source.close("finished")
        raise
    pairs = [(key, key) for key in named_keys(args.spider, settings)]
    pairs += recurring_keys(source, target, pairs[0][0])
    try:
        check_renamed_keys(source, target, pairs, args.force)  # every refusal before moving
        moved = move(source, target, fingerprints=not args.without_fingerprints, force=args.force)
        copied = copy_renamed_keys(source, target, pairs, args.force)
    except (MoveRefusedError, ConfigurationError) as exc:
        raise SystemExit(str(exc)) from None
    finally:
        for scheduler in (source, target):
            scheduler.close("finished")
    moved.keys = [new for _, new in copied]
    print(
        f"Moved {moved.requests} requests{f' ({moved.due} due later)' if moved.due else ''} "
        f"and {moved.fingerprints} fingerprints of "
        f"{args.spider}; copied {', '.join(moved.keys) or 'no other key'}."
    )
    if args.delete_source:
        source.flush()  # the queue, its leases, the fingerprints
        for old, _ in copied:  # (one at a time: a cluster's keys of several slots)
            source.server.unlink(old)
        print("Deleted the source crawl.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
