"""Put entries set aside, or held by dead workers, back in a spider's queue.

``--invalid``: the queue entries set aside as undecodable (``<queue>:invalid``) that
decode now (after SCHEDULER_SERIALIZER or the spider was fixed), and the start
messages set aside as invalid (``<first start key>:invalid``) that the spider makes
requests of now (checked as ``push`` checks them), 500 per script call
with their removal from the list (``lua/invalid_requeue.lua``: each one checked at the
position it was read from, then all removed by one LREM); those that still do
not decode stay, and the first reason is printed. ``--expired``: the requests and start
messages leased by workers whose lease expired, recovered as a worker recovers them
(``lua/lease_expired.lua`` and ``lua/lease_requeue.lua``: a delivery is counted, and a
request delivered SCHEDULER_MAX_DELIVERIES times goes to the dead letters). ``--dead``:
the dead letters of the queue and of the start key, oldest first
(``lua/dead_requeue.lua``). Without any of them: ``--invalid --expired``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.client import NEVER_DECODE

from scrapy_redis import defaults
from scrapy_redis.commands.context import CommandError
from scrapy_redis.commands.verbs._common import add_spider_arguments
from scrapy_redis.commands.verbs.push import refusal
from scrapy_redis.exceptions import UndecodableRequestError
from scrapy_redis.fleet import operations
from scrapy_redis.queue import Entry, FifoQueue, LifoQueue, PriorityQueue
from scrapy_redis.queues.deadletters import requeue_dead_letters
from scrapy_redis.queues.leases import Recovery
from scrapy_redis.store.keys import (
    dead_letters_key,
    deliveries_key,
    invalid_entries_key,
    lease_deadlines_key,
    leases_key,
    priority_list_key,
)
from scrapy_redis.store.redis_values import Reader
from scrapy_redis.store.scripts import script

if TYPE_CHECKING:
    import argparse

    from scrapy_redis.commands.context import Context
    from scrapy_redis.commands.crawl import Crawl

#: Invalid entries read and put back per script call.
BATCH = 500


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_spider_arguments(parser)
    parser.add_argument("--invalid", action="store_true", help="entries set aside as invalid")
    parser.add_argument("--expired", action="store_true", help="leases of dead workers")
    parser.add_argument("--dead", action="store_true", help="dead letters")


def run(args: argparse.Namespace, context: Context) -> int:
    crawl = context.crawl(args.spider, args.spider_args)
    if not crawl.lanes and not crawl.start_keys:
        raise CommandError(f"The spider {crawl.name!r} uses no queue and no start key in Redis.")
    check_types(crawl)
    chosen = args.invalid or args.expired or args.dead
    report: dict[str, Any] = {"spider": crawl.name}
    if args.invalid or not chosen:
        report["invalid"] = _invalid(crawl)
        if crawl.start_keys:
            report["invalid_start"] = _invalid_start(crawl)
    if args.expired or not chosen:
        report["expired"] = _expired(crawl)
    if args.dead:
        report["dead"] = _dead(crawl)
    if args.json:
        context.json(report)
    else:
        _print(context, report)
    still = [report.get(part, {}).get("still_invalid") for part in ("invalid", "invalid_start")]
    return 1 if any(still) else 0


def check_types(crawl: Crawl) -> None:
    """:class:`~scrapy_redis.store.redis_values.UnreadableValueError` naming a key the scripts
    would refuse (WRONGTYPE, which names no key) before anything is moved."""
    reader, cluster = Reader(crawl.server), crawl.cluster
    for base in [lane.key for lane in crawl.lanes] + crawl.start_keys[:1]:
        reader.expect(leases_key(base, cluster), "hash", "hash")
        reader.expect(lease_deadlines_key(base, cluster), "sorted set", "zset")
        reader.expect(deliveries_key(base, cluster), "hash", "hash")
        reader.expect(invalid_entries_key(base, cluster), "list", "list")
        reader.expect(dead_letters_key(base, cluster), "list", "list")


def _invalid(crawl: Crawl) -> dict[str, Any]:
    requeued = kept = 0
    error: str | None = None
    for lane in crawl.lanes:
        moved, left, reason = requeue_invalid(crawl, lane)
        requeued, kept, error = requeued + moved, kept + left, error or reason
    return {"requeued": requeued, "still_invalid": kept, "reason": error}


def requeue_invalid(crawl: Crawl, queue: Any) -> tuple[int, int, str | None]:
    """Put back the invalid entries of ``queue`` that decode now: how many went back,
    how many stay, and why the first of those does not decode."""
    op = _put_back_op(queue)
    key = invalid_entries_key(queue.key, crawl.cluster)

    def check(data: bytes) -> tuple[Any, str | None]:
        try:
            priority = queue.decode(Entry(data)).priority
        except UndecodableRequestError as exc:
            return None, str(exc)
        return priority, None

    def list_of(priority: Any) -> str | None:
        return priority_list_key(queue.key, priority, crawl.cluster) if op == "prio" else None

    return put_back(crawl, key, queue.key, op, check, list_of)


def _invalid_start(crawl: Crawl) -> dict[str, Any]:
    """Put back the start messages set aside as invalid (``<first start key>:invalid``)
    that the spider makes requests of now (checked as ``push`` checks them)."""
    start_key = crawl.start_keys[0]
    key = invalid_entries_key(start_key, crawl.cluster)
    op = {"list": "rpush", "set": "sadd", "zset": "zadd"}[crawl.start_mode]
    encoding = getattr(crawl.spider, "redis_encoding", None) or "utf-8"

    def check(data: bytes) -> tuple[Any, str | None]:
        try:
            message = data.decode(encoding)
        except UnicodeDecodeError as exc:
            return None, f"not {encoding} text ({exc.reason})"
        reason = refusal(crawl, message)
        return (0 if reason is None else None), reason

    moved, kept, reason = put_back(crawl, key, start_key, op, check, lambda _: None)
    return {"requeued": moved, "still_invalid": kept, "reason": reason}


def put_back(
    crawl: Crawl,
    key: str,
    target: str,
    op: str,
    check: Callable[[bytes], tuple[Any, str | None]],
    list_of: Callable[[Any], str | None],
) -> tuple[int, int, str | None]:
    """Put back the entries of the list ``key`` that ``check`` passes (it gives their
    priority or score, or why not) into ``target`` (``op``: see lua/invalid_requeue.lua),
    :data:`BATCH` per script call: how many went back, how many stay, and the first
    reason."""
    offset = moved = kept = 0
    reason: str | None = None
    while True:
        raws = crawl.server.execute_command(
            "LRANGE", key, offset, offset + BATCH - 1, **{NEVER_DECODE: True}
        )
        if not raws:
            return moved, kept, reason
        keys: list[str] = [key, target]
        args: list[Any] = [op, f"scrapy-redis:requeued:{uuid.uuid4().hex}"]  # a tombstone
        for position, data in enumerate(raws, offset):
            priority, why = check(data)
            if why is not None:
                kept, reason = kept + 1, reason or why
                continue
            if (own_list := list_of(priority)) is not None:
                keys.append(own_list)
            args += [position, len(keys), priority, data]
        done = int(script("invalid_requeue")(crawl.server, keys, args)) if len(args) > 2 else 0
        moved += done
        offset += len(raws) - done  # those left in place come first


def _put_back_op(queue: Any) -> str:
    """How ``queue``'s entries go back at the end popped next (see ``put_back()`` in
    lua/_leases.lua)."""
    if isinstance(queue, PriorityQueue):
        return "prio"
    if isinstance(queue, LifoQueue):
        return "lpush"
    if isinstance(queue, FifoQueue):
        return "rpush"
    raise CommandError(
        f"Cannot put entries back in a {type(queue).__name__} (SCHEDULER_QUEUE_CLASS): "
        "requeue knows the queues of scrapy_redis.queue."
    )


def _expired(crawl: Crawl) -> dict[str, int]:
    total = Recovery(0, 0)
    for base in [lane.key for lane in crawl.lanes] + crawl.start_keys[:1]:
        recovered = recover_expired(crawl, base)
        total = Recovery(
            total.requeued + recovered.requeued, total.dead_lettered + recovered.dead_lettered
        )
    return {"requeued": total.requeued, "dead_lettered": total.dead_lettered}


def recover_expired(crawl: Crawl, base_key: str) -> Recovery:
    """Recover every expired lease of ``base_key`` (a queue, or the first start key)."""
    settings = crawl.settings
    return operations.recover_expired(
        crawl.server,
        base_key,
        settings.getfloat("SCHEDULER_WORKER_TIMEOUT", defaults.SCHEDULER_WORKER_TIMEOUT),
        settings.getint("SCHEDULER_MAX_DELIVERIES", defaults.SCHEDULER_MAX_DELIVERIES),
    )


def _dead(crawl: Crawl) -> dict[str, int]:
    bases = [lane.key for lane in crawl.lanes] + crawl.start_keys[:1]
    return {"requeued": sum(requeue_dead_letters(crawl.server, base) for base in bases)}


def _print(context: Context, report: dict[str, Any]) -> None:
    if "invalid" in report:
        invalid = report["invalid"]
        context.write(f"Invalid entries put back in the queue: {invalid['requeued']}")
        if invalid["still_invalid"]:
            context.warn(
                f"Still invalid, left in place: {invalid['still_invalid']} (first reason: "
                f"{invalid['reason']})"
            )
    if "invalid_start" in report:
        start = report["invalid_start"]
        context.write(f"Invalid start messages put back: {start['requeued']}")
        if start["still_invalid"]:
            context.warn(
                f"Still invalid start messages, left in place: {start['still_invalid']} "
                f"(first reason: {start['reason']})"
            )
    if "expired" in report:
        expired = report["expired"]
        context.write(
            f"Expired leases: {expired['requeued']} entries put back, "
            f"{expired['dead_lettered']} moved to the dead letters"
        )
    if "dead" in report:
        context.write(f"Dead letters put back: {report['dead']['requeued']}")
