"""Leases: what a worker took from Redis stays recorded there until it is done.

Popping requests moves them, in the same Lua script, into the hash
``<base>:leases``: one lease per pop, its id mapped to a record of where the
entries came from and the entries (a start message gets a lease of its own),
with a deadline in the sorted set ``<base>:lease_deadlines``, on the server's
clock. The worker acknowledges each request when done (its entry is removed
from the record; the lease is deleted with the last one), renews the deadlines
of what it still holds every third of SCHEDULER_WORKER_TIMEOUT, and puts back
what it did not finish when it closes. A lease whose deadline has passed
belongs to a dead worker: any worker puts its entries that are not done back
where they came from (same queue, same priority, at the end popped next), so
nothing popped is lost. Lease ids are ``<worker id>:<sequence number>``.

Each such recovery counts a delivery of each entry in ``<base>:deliveries``
(by the SHA1 of the entry): an entry delivered SCHEDULER_MAX_DELIVERIES times
(a request that kills or hangs every worker that takes it) goes to the dead
letters ``<base>:dead`` instead; an entry with a delivery counted is leased
alone, so that the entries popped with it are not blamed for it; the count is
forgotten when the entry is done.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from redis.client import NEVER_DECODE

from scrapy_redis import defaults
from scrapy_redis.connection import is_cluster
from scrapy_redis.queues.records import record_keys
from scrapy_redis.store.keys import (
    dead_letters_key,
    deliveries_key,
    lease_deadlines_key,
    leases_key,
)
from scrapy_redis.store.scripts import script

# How many expired leases one recovery pass puts back at most.
_RECOVER_BATCH = 500


@dataclass(eq=False, slots=True)
class Lease:
    """The entries one pop leased under one id."""

    id: str
    #: How many of them are not released yet (done, or put back).
    unreleased: int


#: Entries of leases whose work is done: (lease, positions of its entries, 1 = the first).
Releases = Sequence[tuple[Lease, Sequence[int]]]


@dataclass(frozen=True, slots=True)
class Ticket:
    """What a pop script needs to lease entries: under ``id`` for a batch, under ``count``
    ids from ``first`` on for start messages (one lease each)."""

    leases_key: str
    deadlines_key: str
    timeout_ms: int
    prefix: str
    first: int
    #: Leases whose work is done, released by the same pop script (see release_args()).
    releases: tuple[tuple[Lease, tuple[int, ...]], ...] = ()
    #: The deliveries hash (an entry with deliveries counted is leased alone).
    deliveries_key: str = ""

    @property
    def id(self) -> str:
        return f"{self.prefix}{self.first}"

    def ids(self, count: int) -> list[str]:
        return [f"{self.prefix}{self.first + n}" for n in range(count)]


#: What the scripts take to release (or put back) entries, per lease: its id, then
#: ``[0]`` for all it still holds, or the count and the positions (1 = the first).
#: Both lease models come down to it: whole leases by id (start messages, see
#: _whole()) and entries of batch leases by position (the scheduler, see _parts()).
Groups = list[tuple[str, list[int]]]


def _whole(ids: Iterable[str]) -> Groups:
    """Groups releasing the leases ``ids`` whole."""
    return [(lease_id, [0]) for lease_id in ids]


def _parts(releases: Releases) -> Groups:
    """Groups releasing these entries of batch leases (whole when all it still holds)."""
    return [(lease.id, _positions_arg(lease, positions)) for lease, positions in releases]


def _flat(groups: Groups) -> list[str | int]:
    """Groups as script arguments."""
    args: list[str | int] = []
    for lease_id, positions in groups:
        args += [lease_id, *positions]
    return args


def release_args(releases: Releases) -> list[str | int]:
    """What the scripts take to release (or put back) entries: per lease its id, then 0
    for all it still holds, or the count and positions of the entries."""
    return _flat(_parts(releases))


def _positions_arg(lease: Lease, positions: Sequence[int]) -> list[int]:
    """``[0]`` when ``positions`` are all the entries ``lease`` still holds, else the
    count and the positions."""
    return [0] if len(positions) >= lease.unreleased else [len(positions), *positions]


class Recovery(NamedTuple):
    """What one recovery of expired leases did."""

    #: Entries put back where they came from.
    requeued: int
    #: Entries moved to the dead letters (delivered SCHEDULER_MAX_DELIVERIES times).
    dead_lettered: int


def lease_flush_keys(base_key: str, cluster: bool) -> list[str]:
    """The lease keys of the queue (or lane, or start key) ``base_key`` deleted with it:
    the leases, their deadlines, the delivery counts (the dead letters are kept, as the
    entries set aside as invalid are). A :class:`LeaseBook`'s ``flush_keys``."""
    return [
        leases_key(base_key, cluster),
        lease_deadlines_key(base_key, cluster),
        deliveries_key(base_key, cluster),
    ]


def _seq(lease_id: str) -> int:
    return int(lease_id.rsplit(":", 1)[1])


class LeaseBook:
    """This worker's leases on one pair of lease keys."""

    def __init__(
        self,
        server: Any,
        base_key: str,
        worker_id: str,
        timeout: float,
        max_deliveries: int = defaults.SCHEDULER_MAX_DELIVERIES,
    ) -> None:
        self.server = server
        cluster = is_cluster(server)  # the lease keys in the base key's slot
        self.leases_key = leases_key(base_key, cluster)
        self.deadlines_key = lease_deadlines_key(base_key, cluster)
        self.deliveries_key = deliveries_key(base_key, cluster)
        self.dead_letters_key = dead_letters_key(base_key, cluster)
        self.max_deliveries = max_deliveries
        self.prefix = f"{worker_id}:"
        self.timeout_ms = max(1, int(timeout * 1000))
        self.held: set[str] = set()
        self._next = 1

    @property
    def keys(self) -> list[str]:
        return [self.leases_key, self.deadlines_key]

    @property
    def flush_keys(self) -> list[str]:
        """The keys deleted with the queue (see :func:`lease_flush_keys`)."""
        return [*self.keys, self.deliveries_key]

    @property
    def requeue_keys(self) -> list[str]:
        """The first keys of lease_requeue.lua."""
        return [*self.keys, self.deliveries_key, self.dead_letters_key]

    def ticket(self, count: int = 1, releases: Releases = ()) -> Ticket:
        """Reserve ``count`` lease ids for one pop, which also releases ``releases``."""
        ticket = Ticket(
            self.leases_key,
            self.deadlines_key,
            self.timeout_ms,
            self.prefix,
            self._next,
            tuple((lease, tuple(positions)) for lease, positions in releases),
            self.deliveries_key,
        )
        self._next += count
        return ticket

    # Two lease models share what follows: start messages are leased one per id and
    # released whole (ticket(count), taken, ack, give_back); the scheduler's batches are
    # leased under one id and released entry by entry (ticket(releases=...), taken_batch,
    # release, give_back_entries, set_aside). Both release through the pop that takes
    # more (the ticket's releases) or through one script call of Groups.

    def taken(self, ticket: Ticket, count: int) -> list[str]:
        """Record that the pop of ``ticket`` ran and leased ``count`` entries, one lease
        each; their ids."""
        return self._took(ticket, ticket.ids(count))

    def taken_batch(self, ticket: Ticket, count: int) -> Lease | None:
        """Record that the pop of ``ticket`` ran and leased ``count`` entries under its
        id; their lease (None if it popped nothing)."""
        self._took(ticket, [ticket.id] if count else [])
        return Lease(ticket.id, count) if count else None

    def _took(self, ticket: Ticket, ids: list[str]) -> list[str]:
        """The pop of ``ticket`` released its releases and leased under ``ids``."""
        self._released(ticket.releases)
        self.held.update(ids)
        return ids

    def release(self, releases: Releases) -> None:
        """Release entries whose work is done."""
        if self._ack(_parts(releases)):
            self._released(releases)

    def ack(self, ids: Iterable[str]) -> None:
        """Release whole leases whose work is done."""
        ids = list(ids)
        if self._ack(_whole(ids)):
            self.held.difference_update(ids)

    def _ack(self, groups: Groups) -> bool:
        """Release ``groups`` (their work is done); whether there were any."""
        if not groups:
            return False
        script("lease_ack")(self.server, [*self.keys, self.deliveries_key], _flat(groups))
        return True

    def set_aside(self, releases: Releases, key: str) -> int:
        """Move these entries to the list ``key`` and release them, in one script call;
        how many were moved."""
        args = [arg for lease, positions in releases for n in positions for arg in (lease.id, n)]
        if not args:
            return 0
        keys = [*self.keys, key, self.deliveries_key]
        moved = int(script("lease_set_aside")(self.server, keys, args))
        self._released(releases)
        return moved

    def _released(self, releases: Releases) -> None:
        for lease, positions in releases:
            lease.unreleased -= len(positions)
            if lease.unreleased <= 0:
                self.held.discard(lease.id)

    def clear(self) -> None:
        """Delete every lease of these keys, this worker's and the others' (a flush):
        their entries never come back."""
        self.server.unlink(*self.flush_keys)
        self.held.clear()

    def renew(self) -> int:
        """Push back the deadline of every lease still held (the heartbeat)."""
        if not self.held:
            return 0
        return int(
            script("lease_renew")(self.server, [self.deadlines_key], [self.timeout_ms, *self.held])
        )

    def give_back(self, ids: Iterable[str]) -> int:
        """Put back at once every entry the leases ``ids`` still hold (graceful stop)."""
        ids = list(ids)
        returned = self._give_back(_whole(ids))
        self.held.difference_update(ids)
        return returned

    def give_back_entries(self, releases: Releases) -> int:
        """Put back at once these entries of held leases (graceful stop)."""
        returned = self._give_back(_parts(releases))
        self._released(releases)
        return returned

    def _give_back(self, groups: Groups) -> int:
        """Put back the entries ``groups`` name, of the leases that still exist."""
        if not groups:
            return 0
        positions_of = dict(groups)
        ids = sorted(positions_of, key=_seq, reverse=True)
        records = self.server.execute_command(
            "HMGET", self.leases_key, *ids, **{NEVER_DECODE: True}
        )
        pairs = [(i, r) for i, r in zip(ids, records, strict=True) if r is not None]
        return self._requeue("all", pairs, positions_of).requeued

    def recover_expired(self) -> Recovery:
        """Put back the entries of leases past their deadline (dead workers), or move
        them to the dead letters once delivered ``max_deliveries`` times."""
        reply = script("lease_expired")(self.server, self.keys, [_RECOVER_BATCH])
        pairs = [(reply[i].decode(), reply[i + 1]) for i in range(0, len(reply), 2)]
        pairs = [(i, r) for i, r in pairs if i not in self.held]
        return self._requeue("expired", pairs)

    def count_all(self) -> int:
        """How many leases exist, this worker's included."""
        count: int = self.server.zcard(self.deadlines_key)
        return count

    def _requeue(
        self,
        mode: str,
        pairs: Sequence[tuple[str, bytes]],
        positions_of: dict[str, list[int]] | None = None,
    ) -> Recovery:
        """Put back the entries of ``pairs`` (lease id, record): all those each still
        holds, or those ``positions_of`` names (see _positions_arg())."""
        if not pairs:
            return Recovery(0, 0)
        pairs = sorted(pairs, key=lambda pair: _seq(pair[0]), reverse=True)
        keys = sorted({key for _, record in pairs for key in record_keys(record)})
        args: list[str | int] = [mode, self.max_deliveries]
        for lease_id, _ in pairs:
            args += [lease_id, *(positions_of or {}).get(lease_id, [0])]
        requeued, dead = script("lease_requeue")(self.server, [*self.requeue_keys, *keys], args)
        return Recovery(int(requeued), int(dead))
