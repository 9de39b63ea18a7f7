"""Write a spider's items, fingerprints or queued requests as JSON lines.

``items``: RedisPipeline's list, each item as stored (JSON by default), oldest first.
``fingerprints``: the duplicate filter's fingerprints, ``{"fingerprint": "<hex>"}``
each; only the exact filter (RFPDupeFilter, a set) can list them: the lean filter keeps
a part of each fingerprint's bits and the Bloom filter none, so they are refused.
``invalid``: the queue entries set aside as undecodable (every lane's
``<queue>:invalid``), ``{"key", "entry", "error"}``, then the start messages set aside
as invalid (``<first start key>:invalid``), ``{"key", "message", "error"}``, each with
why it is invalid now (``requeue --invalid`` puts back those that are not any more).
``queue``: the requests waiting in the queue (every lane), in the order they are popped,
decoded with SCHEDULER_SERIALIZER: ``{"url", "method", "priority", "meta", ...}``; an
entry that does not decode is written as ``{"key", "error"}``. Requests leased by
workers are not in the queue, and not written. To stdout, or to ``-o FILE``; the count
goes to stderr, with a progress bar on a terminal.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TextIO

from redis.client import NEVER_DECODE

from scrapy_redis.commands.context import CommandError, jsonable
from scrapy_redis.commands.verbs._common import add_spider_arguments
from scrapy_redis.commands.verbs.push import refusal
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.dupefilters.bloom import BloomDupeFilter
from scrapy_redis.dupefilters.lean import LeanDupeFilter
from scrapy_redis.fleet.queue_lengths import index_priority, queue_lengths
from scrapy_redis.politeness.queue import member_request, queued_members
from scrapy_redis.queue import FifoQueue, LifoQueue, PriorityQueue
from scrapy_redis.store.keys import (
    invalid_entries_key,
    priority_list_key,
    slot_queue_keys,
    slot_store_keys,
)
from scrapy_redis.store.redis_values import Reader, printable_json

if TYPE_CHECKING:
    import argparse

    from scrapy_redis.commands.context import Context
    from scrapy_redis.commands.crawl import Crawl

#: Entries read per command.
CHUNK = 1000
#: The fields written first, in this order, for a request.
FIRST_FIELDS = ("url", "method", "priority", "meta")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_spider_arguments(parser)
    parser.add_argument("what", choices=("items", "fingerprints", "queue", "invalid"))
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default: stdout)")


def run(args: argparse.Namespace, context: Context) -> int:
    crawl = context.crawl(args.spider, args.spider_args)
    lines, total = _source(crawl, args.what)
    progress = context.progress(f"export {args.what}", total)
    count = 0
    stream: TextIO
    with _open(args.output, context) as stream:
        for line in lines:
            stream.write(line + "\n")
            count += 1
            progress.advance()
    progress.finish()
    where = args.output or "stdout"
    noun = "queued requests" if args.what == "queue" else args.what
    context.warn(f"Exported {count} {noun} of {crawl.name} to {where}.")
    return 0


def _open(path: str | None, context: Context) -> Any:
    if path is None:
        from contextlib import nullcontext

        return nullcontext(context.stdout)
    return open(path, "w", encoding="utf-8")  # closed by the caller's with block


def _source(crawl: Crawl, what: str) -> tuple[Iterator[str], int | None]:
    """The lines to write, and how many (None: unknown)."""
    if what == "items":
        return item_lines(crawl), Reader(crawl.server).llen(crawl.items_key)
    if what == "fingerprints":
        if not crawl.filters:
            raise CommandError(f"The spider {crawl.name!r} does not use the Redis scheduler.")
        for dupefilter in crawl.filters:
            _check_listable(dupefilter)
        total = sum(_size(crawl.server, f.key) for f in crawl.filters)
        return fingerprint_lines(crawl), total
    if what == "invalid":
        keys = [invalid_entries_key(lane.key, crawl.cluster) for lane in crawl.lanes]
        keys += [invalid_entries_key(key, crawl.cluster) for key in crawl.start_keys[:1]]
        return invalid_lines(crawl), sum(Reader(crawl.server).llen(key) for key in keys)
    if not crawl.lanes:
        raise CommandError(f"The spider {crawl.name!r} does not use the Redis scheduler.")
    reader = Reader(crawl.server)  # (what cannot be read is named, before any line)
    lengths = [queue_lengths(crawl.server, lane.key, crawl.cluster, reader) for lane in crawl.lanes]
    return request_lines(crawl), sum(total for _, total, _ in lengths)


def item_lines(crawl: Crawl) -> Iterator[str]:
    """The items, oldest first, as stored (on one line each)."""
    for raw in _list_range(crawl.server, crawl.items_key):
        text = raw.decode("utf-8", "backslashreplace")
        yield _one_line(text)


def _one_line(text: str) -> str:
    """An item on one line, with no character a terminal would not show as itself (an
    item that has some is written again as JSON, with ``\\u`` escapes)."""
    if text.isprintable():
        return text
    try:
        line = json.dumps(json.loads(text, strict=False), ensure_ascii=False)
    except (ValueError, RecursionError):
        line = json.dumps(text, ensure_ascii=False)
    return printable_json(line)


def _check_listable(dupefilter: Any) -> None:
    if isinstance(dupefilter, (LeanDupeFilter, BloomDupeFilter)):
        raise CommandError(
            f"The {type(dupefilter).__name__} cannot list its fingerprints: the lean filter "
            "keeps a part of each fingerprint's bits, the Bloom filter only bits shared by "
            "many. Only RFPDupeFilter (a set of fingerprints) can be exported."
        )
    if not isinstance(dupefilter, RFPDupeFilter):
        raise CommandError(
            f"The duplicate filter {type(dupefilter).__name__} (DUPEFILTER_CLASS) is not one "
            "of scrapy_redis.dupefilter: its fingerprints cannot be listed."
        )


def fingerprint_lines(crawl: Crawl) -> Iterator[str]:
    for dupefilter in crawl.filters:
        server, key = crawl.server, dupefilter.key
        if server.type(key) in (b"zset", "zset"):  # fingerprints that expire: with when
            for member, expires in server.zscan_iter(key, count=CHUNK):
                yield json.dumps({"fingerprint": _text(member), "expires_ms": _ms(expires)})
            continue
        for member in server.sscan_iter(key, count=CHUNK):
            yield json.dumps({"fingerprint": _text(member)})


def _size(server: Any, key: str) -> int:
    """The fingerprints of the set (or sorted set: DUPEFILTER_LIFETIME) ``key``."""
    is_zset = server.type(key) in (b"zset", "zset")
    return int(server.zcard(key) if is_zset else server.scard(key))


def _text(member: bytes | str) -> str:
    return member.decode("ascii", "replace") if isinstance(member, bytes) else member


def _ms(score: float) -> int | None:
    """An expiry score as ms (None: never)."""
    return None if score == float("inf") else int(score)


def request_lines(crawl: Crawl) -> Iterator[str]:
    """The queued requests of every lane, in pop order, as JSON."""
    for lane in crawl.lanes:
        for key, data in _entries(crawl.server, lane):
            yield json.dumps(jsonable(_request(lane, key, data)), ensure_ascii=False)


def _entries(server: Any, queue: Any) -> Iterator[tuple[str, bytes]]:
    """``(key, entry)`` of ``queue`` in the order its entries are popped (queued per
    download slot, SCHEDULER_FLEET_LIMITS: slot by slot, each in its pop order)."""
    per_slot = slot_queue_keys(queue.key, queue.on_cluster)[0]
    lists = slot_store_keys(queue.key, queue.on_cluster)[0]
    if Reader(server).type(queue.key) == "none" and server.exists(per_slot, lists):
        members = queued_members(server, queue.key, queue.on_cluster)
        yield from ((per_slot, member_request(m)) for m in members)
    elif isinstance(queue, PriorityQueue):
        for member in Reader(server).zrange(queue.key):
            priority = index_priority(queue.key, member)
            if priority is not None:  # (an entry of the original: skipped)
                key = priority_list_key(queue.key, priority, queue.on_cluster)
                yield from ((key, data) for data in _list_range(server, key))
    elif isinstance(queue, LifoQueue):  # LPUSH, LPOP: from the head
        yield from ((queue.key, data) for data in _list_range(server, queue.key))
    elif isinstance(queue, FifoQueue):  # LPUSH, RPOP: from the tail
        yield from ((queue.key, data) for data in _list_range(server, queue.key, reverse=True))
    else:
        raise CommandError(
            f"Cannot read a {type(queue).__name__} (SCHEDULER_QUEUE_CLASS): export knows "
            "the queues of scrapy_redis.queue."
        )


def _list_range(server: Any, key: str, reverse: bool = False) -> Iterator[bytes]:
    """The list ``key`` from its head (``reverse``: from its tail), CHUNK at a time
    (:class:`~scrapy_redis.store.redis_values.UnreadableValueError` if it is not a list)."""
    Reader(server).expect(key, "list", "list")
    start = 0
    while True:
        if reverse:
            chunk = _lrange(server, key, -start - CHUNK, -start - 1)[::-1]
        else:
            chunk = _lrange(server, key, start, start + CHUNK - 1)
        yield from chunk
        if len(chunk) < CHUNK:
            return
        start += CHUNK


def _lrange(server: Any, key: str, start: int, stop: int) -> list[bytes]:
    reply: list[bytes] = server.execute_command("LRANGE", key, start, stop, **{NEVER_DECODE: True})
    return reply


def invalid_lines(crawl: Crawl) -> Iterator[str]:
    """The queue entries set aside as undecodable (every lane), then the start messages
    set aside as invalid: ``{"key", "entry" or "message", "error"}`` each, with why it is
    invalid now."""
    for lane in crawl.lanes:
        key = invalid_entries_key(lane.key, crawl.cluster)
        for data in _list_range(crawl.server, key):
            error = _request(lane, key, data).get("error", "decodes now")
            entry = data.decode("utf-8", "backslashreplace")
            yield json.dumps({"key": key, "entry": entry, "error": error}, ensure_ascii=False)
    if not crawl.start_keys:
        return
    key = invalid_entries_key(crawl.start_keys[0], crawl.cluster)
    for data in _list_range(crawl.server, key):
        message = data.decode("utf-8", "backslashreplace")
        error = refusal(crawl, message) or "the spider makes requests of it now"
        yield json.dumps({"key": key, "message": message, "error": error}, ensure_ascii=False)


def _request(queue: Any, key: str, data: bytes) -> dict[str, Any]:
    try:
        fields: dict[str, Any] = queue.serializer.loads(data)
    except Exception as exc:  # untrusted data: written as an error line, not a crash
        return {"key": key, "error": f"cannot be decoded with SCHEDULER_SERIALIZER: {exc}"}
    first = {name: fields[name] for name in FIRST_FIELDS if name in fields}
    return {**first, **{name: v for name, v in fields.items() if name not in first}}
