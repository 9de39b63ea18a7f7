"""Where the scheduler's requests come from: the shared queue, through a request feed.

A feed hands out requests (:meth:`RequestFeed.next`), answers what the idle
logic asks of the shared queue, keeps its state up on the heartbeat and gives
back what it holds at close. Two feeds behind one protocol:

* :class:`~scrapy_redis.scheduling.leased_feed.LeasedFeed` for our queues (``uses_leases``):
  requests are leased in batches and released when the engine is done with
  them, so that a worker that dies loses nothing;
* :class:`PlainFeed` for a queue class of one's own (its ``pop()``), as the
  original popped: no leases.

Both send the requests this worker has buffered before they pop: the requests
produced by finished requests reach Redis before the leases of those are released
(and a successful send ends an outage).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from scrapy_redis.connection import is_cluster
from scrapy_redis.exceptions import UndecodableRequestError
from scrapy_redis.store.keys import invalid_entries_key, workers_key

if TYPE_CHECKING:
    from scrapy import Request
    from typing_extensions import Self

    from scrapy_redis.queues.leases import Lease
    from scrapy_redis.scheduling.context import SchedulerContext

logger = logging.getLogger("scrapy_redis.scheduler")  # the scheduler's parts log as the scheduler

#: How often an undecodable entry may be skipped in one next_request() call.
MAX_SKIPS = 100


class RequestFeed(Protocol):
    """What the scheduler asks of where its requests come from."""

    def next(self) -> Request | None:
        """The next request, or None: nothing to pop, Redis unreachable, or (with
        :meth:`holding` > 0) those fetched are held back for now (pacing)."""

    def holding(self) -> int:
        """How many requests were fetched from Redis and not handed out yet."""

    def in_hand(self) -> int:
        """How many requests this worker holds from Redis (handed out or not)."""

    def has_requests(self) -> bool:
        """Whether the shared queue holds requests (one Redis call)."""

    def others_hold_leases(self) -> bool:
        """Whether other workers hold leased requests (one Redis call)."""

    def work_elsewhere(self) -> bool:
        """Whether work may still come from Redis: requests queued, or leased by
        other workers. Releases this worker's finished leases first (so that the
        other workers asking the same see this one's work is done)."""

    def maintain(self) -> None:
        """On the heartbeat: keep the leases alive, recover dead workers' requests."""

    def recover(self) -> None:
        """Put back the requests leased by workers that died."""

    def give_back_all(self) -> None:
        """At close: release what is done, put back what is not."""

    def clear(self) -> None:
        """Delete the queue (and the leases)."""

    def flush_keys(self) -> list[str]:
        """The keys deleted with the queue."""

    def key_types(self) -> list[tuple[str, str]]:
        """The keys this feed uses, with their Redis types."""


class HandedOut(weakref.ref):  # type: ignore[type-arg]
    """A request handed to the engine and not done yet, with its leased entry.

    A weak reference: like Scrapy's own scheduler, this one keeps no request alive.
    A freed request is done, since the engine holds those it is working on. One
    object per request (fewer for Python's garbage collector than the request's
    own), hashed by identity: requests that reuse the memory of freed ones are
    other entries.
    """

    __slots__ = ("lease", "position")
    __hash__ = object.__hash__
    __eq__ = object.__eq__

    lease: Lease
    position: int

    @classmethod
    def of(cls, request: Request, lease: Lease, position: int) -> Self:
        # Attributes set here rather than in __init__: a third of the cost to build.
        handed = cls(request)
        handed.lease = lease
        handed.position = position
        return handed


def by_lease(entries: Iterable[tuple[Lease, int]]) -> list[tuple[Lease, list[int]]]:
    """Leased entries (lease, position), grouped: each lease with its positions."""
    positions: dict[Lease, list[int]] = {}
    for lease, position in entries:
        positions.setdefault(lease, []).append(position)
    return list(positions.items())


def queue_has_requests(queue: Any) -> bool:
    is_empty = getattr(queue, "is_empty", None)  # queue classes of one's own may lack it
    return not is_empty() if is_empty is not None else len(queue) > 0


def queue_key_types(queue: Any) -> list[tuple[str, str]]:
    """The queue's keys, with their types (see keytypes.py)."""
    key, cluster = queue.key, is_cluster(queue.server)
    types = [(workers_key(key, cluster), "hash"), (invalid_entries_key(key, cluster), "list")]
    if kind := getattr(queue, "redis_type", None):
        types.append((key, kind))
    if own := getattr(queue, "key_types", None):  # keys derived from its key
        types += own()
    return types


def queue_flush_keys(queue: Any) -> list[str]:
    return list(queue.flush_keys()) if hasattr(queue, "flush_keys") else []


class PlainFeed:
    """A queue popped with its own ``pop()``, one request at a time, without leases."""

    def __init__(self, context: SchedulerContext, send_children: Callable[[], object]) -> None:
        self.context = context
        self.queue = context.queue
        self.send_children = send_children

    def next(self) -> Request | None:
        return self.context.calls.call(self._pop, None)

    def holding(self) -> int:
        return 0

    def in_hand(self) -> int:
        return 0

    def has_requests(self) -> bool:
        return queue_has_requests(self.queue)

    def others_hold_leases(self) -> bool:
        return False

    def work_elsewhere(self) -> bool:
        return self.has_requests()

    def maintain(self) -> None:
        return None

    def recover(self) -> None:
        return None

    def give_back_all(self) -> None:
        return None

    def clear(self) -> None:
        self.queue.clear()

    def flush_keys(self) -> list[str]:
        return queue_flush_keys(self.queue)

    def key_types(self) -> list[tuple[str, str]]:
        return queue_key_types(self.queue)

    def _pop(self) -> Request | None:
        self.send_children()
        calls = self.context.calls
        if calls.halted:
            return None
        for _ in range(MAX_SKIPS):
            try:
                request: Request | None = self.queue.pop()
            except UndecodableRequestError as exc:
                if exc.looks_like_pickle:
                    calls.halt(exc)
                    return None
                self.context.counts.invalid()
                logger.error(
                    "%(error)s Moved it to %(key)s.",
                    {
                        "error": exc,
                        "key": invalid_entries_key(self.queue.key, is_cluster(self.queue.server)),
                    },
                    extra={"spider": self.context.spider},
                )
                continue
            if request is not None:
                self.context.counts.uncounted += 1
            return request
        return None
