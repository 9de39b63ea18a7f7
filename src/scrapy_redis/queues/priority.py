"""The priority queue (importable from :mod:`scrapy_redis.queue`).

One list per priority (``<key>:prio:<n>``) plus a sorted set at ``<key>`` indexing
the non-empty priorities. Higher Scrapy priority first, oldest first within a
priority, identical requests kept apart. Entries the original stored directly in
that sorted set are popped in their priority order too.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from itertools import groupby
from typing import TYPE_CHECKING, Any

from scrapy_redis.queues.base import (
    Base,
    Candidate,
    Entry,
    FilterArgs,
    Seen,
    batch_arg,
    raw_command,
    send_push,
)
from scrapy_redis.queues.leases import Ticket, release_args
from scrapy_redis.queues.records import record_entries
from scrapy_redis.queues.script_push import push_plan, send_chunks
from scrapy_redis.serializers import Serializer
from scrapy_redis.store.keys import priority_list_key
from scrapy_redis.store.scripts import script

if TYPE_CHECKING:
    from scrapy import Spider


class PopReply(IntEnum):
    """The first element of a reply of ``lua/pop_priority.lua`` (see its header)."""

    #: ``{0}``: the queue is empty.
    EMPTY = 0
    #: ``{1, priority, record}``: popped from the expected priority's list (the record
    #: is missing when another worker emptied that list meanwhile).
    POPPED = 1
    #: ``{2, priority}``: the highest priority is another one: pop again with it.
    OTHER_PRIORITY = 2
    #: ``{3, entry, score}``: removed an entry written by the original scrapy-redis.
    ORIGINAL_ENTRY = 3
    #: ``{4}``: the worker holds a suspect and the highest priority has only suspects.
    ONLY_SUSPECTS = 4


class PriorityQueue(Base):
    """Higher ``request.priority`` first; first in, first out within a priority."""

    # Retries when other workers empty or replace the highest priority meanwhile.
    _POP_ATTEMPTS = 8
    #: The Redis type of ``key``, the index (checked when the scheduler opens).
    redis_type = "zset"

    def __init__(
        self, server: Any, spider: Spider, key: str, serializer: Serializer | Any = None
    ) -> None:
        super().__init__(server, spider, key, serializer)
        self._top = 0  # the priority popped last: usually still the highest

    def __len__(self) -> int:
        members = raw_command(self.server, "ZRANGE", self.key, 0, -1)
        priorities = [p for p in map(priority_of_member, members) if p is not None]
        legacy = len(members) - len(priorities)
        if not priorities:
            return legacy
        pipe = self.server.pipeline(transaction=False)
        for priority in priorities:
            pipe.llen(priority_list_key(self.key, cluster=self.on_cluster, priority=priority))
        lengths: list[int] = pipe.execute()
        return legacy + sum(lengths)

    def flush_keys(self) -> list[str]:
        members = raw_command(self.server, "ZRANGE", self.key, 0, -1)
        lists = [
            priority_list_key(self.key, cluster=self.on_cluster, priority=p)
            for p in map(priority_of_member, members)
            if p is not None
        ]
        return [self.key, *lists]

    def push_entries(self, entries: Sequence[Entry]) -> None:
        for priority, group in groupby(entries, key=lambda entry: entry.priority):
            self._push_group(priority, [entry.data for entry in group], "back")

    def push_new(
        self,
        candidates: Sequence[Candidate],
        seen: Seen,
        news: str = "",
        write: int | None = None,
    ) -> list[bool]:
        if not candidates:
            return []
        number: dict[int, int] = {}  # priority -> its list's number in the script call
        for candidate in candidates:
            priority = candidate.entry.priority if candidate.entry else 0
            number.setdefault(priority, len(number) + 1)
        lists = [
            priority_list_key(self.key, cluster=self.on_cluster, priority=priority)
            for priority in number
        ]
        plan = push_plan(self, candidates, seen, write, [self.key, *lists])
        if plan is None:
            return super().push_new(candidates, seen, news, write)
        news_args = self.news_args(news)

        def send(filter_part: FilterArgs) -> Any:
            batch: list[Any] = []
            for candidate, token in zip(candidates, filter_part.tokens, strict=True):
                entry = candidate.entry
                list_number = number[entry.priority if entry else 0]
                batch += [*token, list_number, entry.data if entry else ""]
            keys = [self.key, plan.record, *lists, *filter_part.keys]
            args = [*news_args, len(number), *number, batch_arg(batch), self.writes.ttl_ms]
            args += [plan.write, *filter_part.args]
            return script("dedup_push_priority")(self.server, keys, args)

        return send_push(seen, candidates, plan.filter, send)

    def _push_group(self, priority: int, datas: list[bytes], where: str) -> None:
        key = priority_list_key(self.key, cluster=self.on_cluster, priority=priority)
        keys = [self.key, key, self.writes.key(key)]

        def send(chunk: list[bytes], number: int) -> Any:
            args = [priority, where, self.writes.ttl_ms, number, *chunk]
            return script("push_priority")(self.server, keys, args)

        send_chunks(self.writes, datas, (key, where), send)

    def pop_entries(
        self, count: int, timeout: int = 0, ticket: Ticket | None = None
    ) -> list[Entry]:
        lease_keys: list[str] = []
        lease_args: list[Any] = []
        if ticket is not None:
            lease_keys = [ticket.leases_key, ticket.deadlines_key, ticket.deliveries_key]
            lease_args = [ticket.timeout_ms, ticket.id, *release_args(ticket.releases)]
        for _ in range(self._POP_ATTEMPTS):
            keys = [
                self.key,
                priority_list_key(self.key, cluster=self.on_cluster, priority=self._top),
                *lease_keys,
            ]
            reply = script("pop_priority")(self.server, keys, [self._top, count, *lease_args])
            if ticket is not None:
                lease_args = lease_args[:2]  # released by this call
            kind = reply[0]
            if kind in (PopReply.EMPTY, PopReply.ONLY_SUSPECTS):
                return []  # empty, or only requests this worker must not take now
            if kind == PopReply.ORIGINAL_ENTRY:
                return [Entry(reply[1], legacy_score=reply[2])]
            if kind == PopReply.POPPED and len(reply) > 2:
                return [Entry(data, self._top) for data in record_entries(reply[2])]
            if kind == PopReply.OTHER_PRIORITY:
                self._top = int(reply[1])
        return []

    def restore_entries(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            if entry.legacy_score is not None:
                self.server.zadd(self.key, {entry.data: float(entry.legacy_score)})
        ours = [entry for entry in entries if entry.legacy_score is None]
        for priority, group in groupby(reversed(ours), key=lambda entry: entry.priority):
            self._push_group(priority, [entry.data for entry in group], "front")


def priority_of_member(member: bytes) -> int | None:
    """The priority a PriorityQueue index member stands for; None for an original entry."""
    try:
        text = member.decode("ascii")
    except UnicodeDecodeError:
        return None
    digits = text[1:] if text.startswith("-") else text
    # (more digits than a 64-bit integer: no priority a worker wrote, and more than
    # Python converts past 4,300)
    return int(text) if digits.isdigit() and len(digits) <= 19 else None
