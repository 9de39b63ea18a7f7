"""Delete a spider's queue, fingerprints, items, start messages, or all of its data.

Say what: ``--queue`` (the requests, in every lane, and their leases: one atomic
``lua/queue_purge.lua`` call per lane, so that a push meanwhile cannot leave a priority's
list behind; and the priority lists no index names, found with SCAN), ``--fingerprints``
(the duplicate filter: its set, or the lean filter's buckets and the Bloom filter's
blocks, found with SCAN on every master of a cluster), ``--items`` (RedisPipeline's
list), ``--start`` (the start keys, their leases and the recurring messages), ``--all``
(those, the entries set aside as invalid, the dead letters, the worker registry, the
stats and each worker's).
The recorded lane count goes with the queue and the fingerprints together only (the
filters are split into lanes too), and last: a purge stopped half-way (killed, Redis
gone) and run again deletes the rest. Other keys are deleted with UNLINK (the server frees
the memory in the background), 500 per command, with a progress bar on a terminal. It
asks first unless ``--yes``; and it refuses while workers of the crawl are alive (their
next push would mix with a crawl half deleted) unless ``--force``, before asking and
again after the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from scrapy_redis import defaults
from scrapy_redis.commands.context import CommandError
from scrapy_redis.commands.verbs._common import add_spider_arguments, alive_workers
from scrapy_redis.dupefilters.bloom import BloomDupeFilter
from scrapy_redis.dupefilters.lean import LeanDupeFilter
from scrapy_redis.fleet.operations import purge_queue, scan_keys
from scrapy_redis.metrics.worker import stats_keys
from scrapy_redis.queues.leases import lease_flush_keys
from scrapy_redis.start.recurring import RecurringMessages
from scrapy_redis.store.keys import (
    bloom_blocks_key,
    dead_letters_key,
    derived_pattern,
    forgotten_key,
    format_key,
    invalid_entries_key,
    lanes_key,
    lean_meta_key,
    workers_key,
)
from scrapy_redis.store.redis_values import UnreadableValueError

if TYPE_CHECKING:
    import argparse

    from scrapy_redis.commands.context import Context
    from scrapy_redis.commands.crawl import Crawl

#: Keys per UNLINK.
BATCH = 500
PARTS = ("queue", "fingerprints", "items", "start")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_spider_arguments(parser)
    for part in PARTS:
        parser.add_argument(f"--{part}", action="store_true", help=f"delete the {part}")
    parser.add_argument("--all", action="store_true", help="delete all of the spider's data")
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask")
    parser.add_argument("--force", action="store_true", help="even while workers are alive")


def run(args: argparse.Namespace, context: Context) -> int:
    parts = [part for part in PARTS if args.all or getattr(args, part)]
    if not parts:
        raise CommandError("Say what to purge: --queue, --fingerprints, --items, --start or --all.")
    crawl = context.crawl(args.spider, args.spider_args)
    if not args.force and _refused(context, crawl):
        return 1
    what = ", ".join(parts) + (" and the rest" if args.all else "")
    if not context.confirm(f"Delete the {what} of {crawl.name} in {_where(crawl)}?", args.yes):
        context.warn("Nothing deleted.")
        return 1
    if not args.force and _refused(context, crawl):  # one started while we asked
        return 1
    progress = context.progress(f"purge {crawl.name}, keys")
    deleted = 0
    if "queue" in parts:
        deleted += purge_lanes(crawl, progress.advance)
    for key_batch in _batches(_keys(crawl, parts, args.all)):
        deleted += int(crawl.server.unlink(*key_batch))
        progress.advance(len(key_batch))
    progress.finish()
    if args.json:
        context.json(
            {"spider": crawl.name, "purged": parts, "all": args.all, "keys_deleted": deleted}
        )
    else:
        context.write(f"Deleted {deleted} keys of {crawl.name} ({what}).")
    return 0


def _refused(context: Context, crawl: Crawl) -> bool:
    """Whether workers of the crawl are alive (said, with what to do; so is a registry
    that cannot be read)."""
    try:
        alive = alive_workers(crawl)
    except UnreadableValueError as exc:
        context.warn(f"Refused: the workers cannot be known, {exc}. Add --force to purge.")
        return True
    if alive:
        context.warn(
            f"Refused: {len(alive)} workers of {crawl.name} are alive ({', '.join(alive[:3])}"
            f"{'...' if len(alive) > 3 else ''}). Stop them first, or add --force."
        )
    return bool(alive)


def _where(crawl: Crawl) -> str:
    from scrapy_redis.connection import describe_server

    return describe_server(crawl.server)


def _batches(keys: Iterator[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    for key in keys:
        batch.append(key)
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _keys(crawl: Crawl, parts: list[str], everything: bool) -> Iterator[str]:
    """The keys deleted with UNLINK (the queue's lanes are purged by :func:`purge_lanes`),
    the lane record last: a purge stopped at any point (killed, Redis gone) and run
    again still knows the lanes, and deletes what is left of each."""
    if "fingerprints" in parts:
        yield from filter_keys(crawl)
    if "items" in parts:
        yield crawl.items_key
    if "start" in parts:
        yield from start_keys(crawl)
    if everything:
        yield from other_keys(crawl)
    if "queue" in parts and "fingerprints" in parts and crawl.lanes:
        # How many lanes the data is split into: it goes with both the queue and the filters.
        yield lanes_key(crawl.queue_key, crawl.cluster)


def purge_lanes(crawl: Crawl, advance: Callable[[int], object]) -> int:
    """Delete the requests of every lane and their leases, one atomic script call per lane
    (see :func:`scrapy_redis.fleet.operations.purge_queue`; lanes are in different Redis
    Cluster slots), with the priority lists no index names; ``advance(keys deleted)``
    after each. How many keys were deleted."""
    deleted = 0
    for lane in crawl.lanes:
        keys = purge_queue(crawl.server, lane.key)
        advance(keys)
        deleted += keys
    return deleted


def filter_keys(crawl: Crawl) -> Iterator[str]:
    """Every key of the duplicate filters: the lean and Bloom filters' by SCAN."""
    for dupefilter in crawl.filters:
        key: str = dupefilter.key
        yield key
        yield forgotten_key(key, crawl.cluster)
        if isinstance(dupefilter, LeanDupeFilter):
            yield lean_meta_key(key, crawl.cluster)
            yield from scan_keys(crawl.server, derived_pattern(key, "lean:", crawl.cluster))
        if isinstance(dupefilter, BloomDupeFilter):
            yield bloom_blocks_key(key, crawl.cluster)
            yield from scan_keys(crawl.server, derived_pattern(key, "bloom:", crawl.cluster))


def start_keys(crawl: Crawl) -> Iterator[str]:
    """The start keys, the leases of their messages and the recurring messages (kept
    under the first one)."""
    yield from crawl.start_keys
    if crawl.start_keys:
        yield from lease_flush_keys(crawl.start_keys[0], crawl.cluster)
        yield from RecurringMessages(crawl.server, crawl.start_keys[0]).keys


def other_keys(crawl: Crawl) -> Iterator[str]:
    """What only ``--all`` deletes: set-aside entries, dead letters, registry, stats."""
    for lane in crawl.lanes:
        yield invalid_entries_key(lane.key, crawl.cluster)
        yield dead_letters_key(lane.key, crawl.cluster)
    if crawl.start_keys:
        yield dead_letters_key(crawl.start_keys[0], crawl.cluster)
    if crawl.lanes:
        yield workers_key(crawl.queue_key, crawl.cluster)
    stats = format_key(crawl.settings.get("STATS_KEY") or defaults.STATS_KEY, crawl.name)
    yield from stats_keys(crawl.server, stats)  # the fleet's and each worker's
