"""The list queues: :class:`FifoQueue` and :class:`LifoQueue` (importable from
:mod:`scrapy_redis.queue`). One list; ``LPUSH`` to add, ``RPOP`` (FIFO) or ``LPOP``
(LIFO) to take, as the original did."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
from scrapy_redis.store.scripts import script


class _ListQueue(Base):
    """A list: LPUSH to add; the subclass picks the end to pop from."""

    _pop_command = ""
    _blocking_pop_command = ""
    #: The Redis type of ``key`` (checked when the scheduler opens).
    redis_type = "list"

    def __len__(self) -> int:
        length: int = self.server.llen(self.key)
        return length

    def push_entries(self, entries: Sequence[Entry]) -> None:
        self._push("LPUSH", [entry.data for entry in entries])

    def _push(self, command: str, datas: list[bytes]) -> None:
        """``command`` (LPUSH or RPUSH) of ``datas``, in calls applied once each."""
        keys = [self.key, self.writes.key(self.key)]

        def send(chunk: list[bytes], number: int) -> Any:
            args = [command, self.writes.ttl_ms, number, *chunk]
            return script("push_list")(self.server, keys, args)

        send_chunks(self.writes, datas, (command,), send)

    def push_new(
        self,
        candidates: Sequence[Candidate],
        seen: Seen,
        news: str = "",
        write: int | None = None,
    ) -> list[bool]:
        if not candidates:
            return []
        plan = push_plan(self, candidates, seen, write, [self.key])
        if plan is None:
            return super().push_new(candidates, seen, news, write)
        news_args = self.news_args(news)

        def send(filter_part: FilterArgs) -> Any:
            batch: list[Any] = []
            for candidate, token in zip(candidates, filter_part.tokens, strict=True):
                batch += [*token, candidate.entry.data if candidate.entry else ""]
            args = [*news_args, batch_arg(batch), self.writes.ttl_ms, plan.write]
            keys = [self.key, plan.record, *filter_part.keys]
            return script("dedup_push_list")(self.server, keys, [*args, *filter_part.args])

        return send_push(seen, candidates, plan.filter, send)

    def pop_entries(
        self, count: int, timeout: int = 0, ticket: Ticket | None = None
    ) -> list[Entry]:
        if ticket is not None:
            keys = [self.key, ticket.leases_key, ticket.deadlines_key, ticket.deliveries_key]
            release = release_args(ticket.releases)
            args = [self._pop_command, count, ticket.timeout_ms, ticket.id, *release]
            return [
                Entry(data)
                for data in record_entries(script("lease_list")(self.server, keys, args))
            ]
        if timeout > 0:
            reply = raw_command(self.server, self._blocking_pop_command, self.key, timeout)
            return [Entry(reply[1])] if reply else []
        reply = raw_command(self.server, self._pop_command, self.key, count)
        return [Entry(data) for data in reply or ()]

    def restore_entries(self, entries: Sequence[Entry]) -> None:
        if entries:
            command = "RPUSH" if self._pop_command == "RPOP" else "LPUSH"
            self._push(command, [entry.data for entry in reversed(entries)])


class FifoQueue(_ListQueue):
    """First in, first out."""

    _pop_command = "RPOP"
    _blocking_pop_command = "BRPOP"


class LifoQueue(_ListQueue):
    """Last in, first out."""

    _pop_command = "LPOP"
    _blocking_pop_command = "BLPOP"
