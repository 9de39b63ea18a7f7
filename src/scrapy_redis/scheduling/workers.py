"""How the workers sharing a queue know of each other.

Each scheduler registers in the hash ``<queue key>:workers`` (field: a worker
id, value: a deadline on the Redis server's clock) and renews
its entry every third of SCHEDULER_WORKER_TIMEOUT. An entry past its deadline
belongs to a dead worker and is dropped by the next operation. (What a worker
is working on is tracked by leases, see :mod:`scrapy_redis.queues.leases`.) Joining,
heartbeats and leaving are each one Lua script, so "am I the last worker?" and
the deletion of the shared keys that may follow happen atomically.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twisted.internet import task

from scrapy_redis.connection import is_cluster, one_slot
from scrapy_redis.store.keys import workers_key
from scrapy_redis.store.redis_values import Reader, text_of
from scrapy_redis.store.scripts import script
from scrapy_redis.store.writes import new_worker_id  # re-exported: a worker id is a writer id

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

#: The scheduler's parts log as the scheduler.
scheduler_logger = logging.getLogger("scrapy_redis.scheduler")


_CRAWLER_IDS: weakref.WeakKeyDictionary[Crawler, str] = weakref.WeakKeyDictionary()


def crawler_worker_id(crawler: Crawler) -> str:
    """The worker id of ``crawler``: one :func:`new_worker_id` per crawler, the same for
    every component that asks (the scheduler registers it in the worker registry, the
    stats collector names its per-worker stats hash with it)."""
    worker_id = _CRAWLER_IDS.get(crawler)
    if worker_id is None:
        worker_id = _CRAWLER_IDS[crawler] = new_worker_id()
    return worker_id


def alive_workers(server: Any, queue_key: str) -> list[str]:
    """The ids of the workers of the queue ``queue_key`` whose registry entry has not
    expired (its deadline, ms on the Redis server's clock, is in the future), sorted."""
    now = server_time_ms(server)
    return sorted(worker for worker, due in registered(server, queue_key).items() if due > now)


def registered(server: Any, queue_key: str) -> dict[str, int]:
    """The registry of the queue ``queue_key``: each worker id and its deadline (ms on the
    Redis server's clock; 0 if unreadable). A field starting with ``~`` is a claim (see
    ``lua/workers.lua``), not a worker: left out. An id that is not UTF-8 (not written by
    a worker) is decoded with ``\\xNN`` escapes; a registry that is not a hash raises
    :class:`~scrapy_redis.store.redis_values.UnreadableValueError` naming it."""
    registry = Reader(server).hgetall(workers_key(queue_key, is_cluster(server)))
    deadlines = {text_of(raw_id): _deadline(raw) for raw_id, raw in registry.items()}
    return {worker: due for worker, due in deadlines.items() if not worker.startswith("~")}


def _deadline(raw: bytes | str) -> int:
    try:
        return int(raw)
    except ValueError:
        return 0  # not written by workers.lua, which drops it on its next call


def server_time_ms(server: Any) -> int:
    """The Redis server's clock, in ms (the registry's deadlines are on it)."""
    reply = server.time()
    if isinstance(reply, dict):  # a cluster client: one reply per node
        reply = next(iter(reply.values()))
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


@dataclass(frozen=True, slots=True)
class Census:
    """What one registry operation saw of the other workers."""

    others: int
    flushed: bool
    #: Another worker is deleting the shared keys (a worker joining waits for it).
    flushing: bool = False


def _census(reply: Any) -> Census:
    """A reply of ``workers.lua``: {others, deleted, flushing}."""
    return Census(int(reply[0]), bool(int(reply[1])), bool(int(reply[2])))


class WorkerRegistry:
    """This worker's entry in the registry of one queue."""

    def __init__(self, server: Any, key: str, worker_id: str, timeout: float) -> None:
        self.server = server
        self.key = key
        self.worker_id = worker_id
        self.timeout_ms = max(1, int(timeout * 1000))

    def join(
        self, flush_keys: Sequence[str] = (), after_flush: Callable[[], object] | None = None
    ) -> Census:
        """Register; first delete ``flush_keys`` if given and no other worker is alive.
        While another worker deletes the shared keys key by key (on a Redis Cluster),
        wait for it (for at most the worker timeout): what this worker pushed meanwhile
        could be deleted."""
        deadline = time.monotonic() + self.timeout_ms / 1000
        census = self._run("join", flush_keys, after_flush)
        while census.flushing and time.monotonic() < deadline:
            time.sleep(0.05)
            census = self._run("join", flush_keys, after_flush)
        if census.flushing:  # the claim outlived its deadline? registered all the same
            census = self._run("beat", ())
        return census

    def beat(self) -> Census:
        """Renew this worker's entry."""
        return self._run("beat", ())

    def leave(
        self, flush_keys: Sequence[str] = (), after_flush: Callable[[], object] | None = None
    ) -> Census:
        """Unregister; delete ``flush_keys`` if given and no other worker is alive, then
        run ``after_flush`` (the filter's other keys)."""
        return self._run("leave", flush_keys, after_flush)

    def _run(
        self,
        op: str,
        flush_keys: Sequence[str],
        after_flush: Callable[[], object] | None = None,
    ) -> Census:
        if flush_keys and not one_slot(self.server, [self.key, *flush_keys]):
            return self._run_claimed(op, flush_keys, after_flush)
        args = [op, self.worker_id, self.timeout_ms, "1" if flush_keys else "0"]
        census = _census(script("workers")(self.server, [self.key, *flush_keys], args))
        if census.flushed and after_flush is not None:
            after_flush()
        return census

    def _run_claimed(
        self, op: str, flush_keys: Sequence[str], after_flush: Callable[[], object] | None
    ) -> Census:
        """``op``, the shared keys being in several Redis Cluster slots: claim their
        deletion in the registry's script, delete them and run ``after_flush``, then drop
        the claim (if that fails half-way, the claim expires after the worker timeout:
        a worker joining meanwhile waits)."""
        args = [op, self.worker_id, self.timeout_ms, "2"]
        census = _census(script("workers")(self.server, [self.key], args))
        if census.flushed:
            for start in range(0, len(flush_keys), 500):
                self.server.unlink(*flush_keys[start : start + 500])
            if after_flush is not None:
                after_flush()
            script("workers")(self.server, [self.key], ["flushed", self.worker_id, 1, "0"])
        return census


class Membership:
    """This worker's membership of a crawl: its registry entry and its heartbeat.

    ``beat`` runs every third of SCHEDULER_WORKER_TIMEOUT (on ``reactor``, Twisted's
    by default, or a ``task.Clock``) from :meth:`join` until :meth:`stop`.
    """

    def __init__(
        self,
        registry: WorkerRegistry,
        beat: Callable[[], None],
        timeout: float,
        reactor: Any = None,
        spider: Any = None,
    ) -> None:
        self.registry = registry
        self.spider = spider
        self.heartbeat = task.LoopingCall(beat)
        if reactor is not None:
            self.heartbeat.clock = reactor
        self.interval = timeout / 3
        #: Whether :meth:`join` was called (whatever it did): only then is there a
        #: registry entry to :meth:`leave` (an open() that failed before has none).
        self.joined = False

    def join(
        self, flush_keys: Sequence[str] = (), after_flush: Callable[[], object] | None = None
    ) -> bool:
        """Register (first deleting ``flush_keys`` if no other worker is alive, then
        running ``after_flush``), and start the heartbeat. Whether they were deleted."""
        self.joined = True
        census = self.registry.join(flush_keys, after_flush)
        if flush_keys and not census.flushed:
            scheduler_logger.warning(
                "SCHEDULER_FLUSH_ON_START is set but %(others)d other worker(s) are using "
                "the queue: not flushing it.",
                {"others": census.others},
                extra={"spider": self.spider},
            )
        self.heartbeat.start(self.interval, now=False)
        return census.flushed

    def stop(self) -> None:
        """Stop the heartbeat (close, or a test's SIGKILL)."""
        if self.heartbeat.running:
            self.heartbeat.stop()

    def leave(
        self, flush_keys: Sequence[str] | None, after_flush: Callable[[], object] | None = None
    ) -> bool:
        """Unregister; unless ``flush_keys`` is None, delete them if no other worker is
        alive, then run ``after_flush``. Whether they were deleted."""
        census = self.registry.leave(flush_keys or (), after_flush)
        if flush_keys is not None and not census.flushed:
            scheduler_logger.info(
                "Not clearing the shared queue: %(others)d other worker(s) still use it.",
                {"others": census.others},
                extra={"spider": self.spider},
            )
        return census.flushed
