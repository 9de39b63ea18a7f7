"""Leases: what a worker took from Redis stays recorded there until it is done.

Popping a request (or a start message) moves it, in the same Lua script, into
the hash ``<base>:leases`` (lease id -> where it came from and the entry) with
a deadline in the sorted set ``<base>:lease_deadlines``, on the server's clock.
The worker acknowledges it when done (the lease is deleted), renews the
deadlines of what it still holds every third of SCHEDULER_WORKER_TIMEOUT, and
puts back what it did not finish when it closes. A lease whose deadline has
passed belongs to a dead worker: any worker puts its entry back where it came
from (same queue, same priority, at the end popped next), so nothing popped is
lost. Lease ids are ``<worker id>:<sequence number>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack  # type: ignore[import-untyped]
from redis.client import NEVER_DECODE

from scrapy_redis.keys import lease_deadlines_key, leases_key
from scrapy_redis.scripts import script

# How many expired leases one recovery pass puts back at most.
_RECOVER_BATCH = 500


@dataclass(frozen=True, slots=True)
class Ticket:
    """What a pop script needs to lease ``count`` entries."""

    leases_key: str
    deadlines_key: str
    timeout_ms: int
    prefix: str
    first: int
    #: Ids of leases whose work is done, released by the same pop script.
    release: tuple[str, ...] = ()

    def ids(self, count: int) -> list[str]:
        return [f"{self.prefix}{self.first + n}" for n in range(count)]


def _record_keys(raw: bytes) -> list[str]:
    """The keys a lease record names (where its entry goes back to)."""
    op, key, key2, _arg, _entry = msgpack.unpackb(raw, raw=True)
    keys = [key.decode()]
    if op == b"prio":
        keys.append(key2.decode())
    return keys


def _seq(lease_id: str) -> int:
    return int(lease_id.rsplit(":", 1)[1])


class LeaseBook:
    """This worker's leases on one pair of lease keys."""

    def __init__(self, server: Any, base_key: str, worker_id: str, timeout: float) -> None:
        self.server = server
        self.leases_key = leases_key(base_key)
        self.deadlines_key = lease_deadlines_key(base_key)
        self.prefix = f"{worker_id}:"
        self.timeout_ms = max(1, int(timeout * 1000))
        self.held: set[str] = set()
        self._next = 1

    @property
    def keys(self) -> list[str]:
        return [self.leases_key, self.deadlines_key]

    def ticket(self, count: int, release: Iterable[str] = ()) -> Ticket:
        """Reserve ``count`` lease ids for one pop, which also releases ``release``."""
        ticket = Ticket(
            self.leases_key,
            self.deadlines_key,
            self.timeout_ms,
            self.prefix,
            self._next,
            tuple(release),
        )
        self._next += count
        return ticket

    def taken(self, ticket: Ticket, count: int) -> list[str]:
        """Record that the pop of ``ticket`` ran and leased ``count`` entries; their ids."""
        ids = ticket.ids(count)
        self.held.difference_update(ticket.release)
        self.held.update(ids)
        return ids

    def ack(self, ids: Iterable[str]) -> int:
        """Release leases whose work is done."""
        ids = list(ids)
        if not ids:
            return 0
        released = int(script("lease_ack")(self.server, self.keys, ids))
        self.held.difference_update(ids)
        return released

    def renew(self) -> int:
        """Push back the deadline of every lease still held (the heartbeat)."""
        if not self.held:
            return 0
        return int(
            script("lease_renew")(self.server, [self.deadlines_key], [self.timeout_ms, *self.held])
        )

    def give_back(self, ids: Iterable[str]) -> int:
        """Put the entries of held leases back at once (graceful stop)."""
        ids = sorted(ids, key=_seq, reverse=True)
        if not ids:
            return 0
        self.held.difference_update(ids)
        records = self.server.execute_command(
            "HMGET", self.leases_key, *ids, **{NEVER_DECODE: True}
        )
        pairs = [(i, r) for i, r in zip(ids, records, strict=True) if r is not None]
        return self._requeue("all", pairs)

    def recover_expired(self) -> int:
        """Put back the entries of leases past their deadline (dead workers)."""
        reply = script("lease_expired")(self.server, self.keys, [_RECOVER_BATCH])
        pairs = [(reply[i].decode(), reply[i + 1]) for i in range(0, len(reply), 2)]
        pairs = [(i, r) for i, r in pairs if i not in self.held]
        return self._requeue("expired", pairs)

    def count_all(self) -> int:
        """How many leases exist, this worker's included."""
        count: int = self.server.zcard(self.deadlines_key)
        return count

    def _requeue(self, mode: str, pairs: Sequence[tuple[str, bytes]]) -> int:
        if not pairs:
            return 0
        pairs = sorted(pairs, key=lambda pair: _seq(pair[0]), reverse=True)
        keys = sorted({key for _, record in pairs for key in _record_keys(record)})
        ids = [lease_id for lease_id, _ in pairs]
        return int(script("lease_requeue")(self.server, [*self.keys, *keys], [mode, *ids]))
