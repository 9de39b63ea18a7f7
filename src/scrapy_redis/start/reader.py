"""Start messages popped under leases, held until their requests are scheduled.

A :class:`StartMessageReader` pops batches through a :class:`StartUrlSource`;
each message it pops is leased in the :class:`LeaseBook` of the first start
key. The spider acknowledges a batch once every request made from it is
scheduled (:meth:`StartMessageReader.ack`); until then the heartbeat
(:meth:`StartMessageReader.beat`, every third of SCHEDULER_WORKER_TIMEOUT)
renews the leases, and recovers the messages of workers that stopped
responding. At close, what is still leased goes back where it came from.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from scrapy_redis.connection import is_cluster, one_slot
from scrapy_redis.core.logsafe import short_repr
from scrapy_redis.exceptions import ConfigurationError, InvalidStartMessageError
from scrapy_redis.queues.leases import Lease, LeaseBook, Recovery
from scrapy_redis.scheduling.workers import crawler_worker_id, new_worker_id, server_time_ms
from scrapy_redis.start.recurring import RecurringMessages, message_every, serve_run
from scrapy_redis.start.urls import StartUrlSource
from scrapy_redis.store.keys import invalid_entries_key
from scrapy_redis.store.outage import OUTAGE_ERRORS, OutageGuard

if TYPE_CHECKING:
    from scrapy_redis.start.settings import StartSettings

logger = logging.getLogger("scrapy_redis.spiders")

#: Adds ``count`` to the stat ``key``.
Counter = Callable[[str, int], None]


class StartMessageReader:
    """This worker's reads of start messages, and the leases it holds on them."""

    def __init__(
        self,
        source: StartUrlSource,
        leases: LeaseBook,
        guard: OutageGuard,
        count: Counter,
        spider: Any = None,
    ) -> None:
        self.source = source
        self.leases = leases
        self.guard = guard
        self.count = count
        self.spider = spider  # named in log records
        #: Lease ids of the messages popped whose requests are not scheduled yet.
        self.unacked: list[str] = []
        #: The lease ids of the last pop, one per message, in order.
        self.last_popped: list[str] = []
        #: The recurring start messages (served by :meth:`pop` when due), if read.
        self.recurring: RecurringMessages | None = None
        self._last: tuple[str | None, list[bytes]] = (None, [])

    def is_recurring(self, key: str | None) -> bool:
        """Whether messages popped from ``key`` are runs of recurring messages."""
        return self.recurring is not None and key == self.recurring.key

    @classmethod
    def build(
        cls, server: Any, config: StartSettings, guard: OutageGuard, count: Counter, spider: Any
    ) -> StartMessageReader:
        """A reader of the start keys of ``config``, leasing under its first key with the
        crawler's worker id (the one its scheduler registers), or a new one without a crawler."""
        check_one_slot(server, config.keys)
        recurring = RecurringMessages(server, config.keys[0])
        source = StartUrlSource(
            server, config.keys, config.mode, config.key_check_interval, recurring.keys
        )
        crawler = getattr(spider, "crawler", None)
        worker_id = new_worker_id() if crawler is None else crawler_worker_id(crawler)
        leases = LeaseBook(
            server, config.keys[0], worker_id, config.worker_timeout, config.max_deliveries
        )
        reader = cls(source, leases, guard, count, spider)
        reader.recurring = recurring
        return reader

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between two heartbeats: a third of the lease timeout."""
        return self.leases.timeout_ms / 3000

    def recurs(self, key: str | None, data: bytes, made: list[Any], encoding: str) -> bool:
        """Serve a run of a recurring message (its requests ``made`` unfiltered, see
        start/recurring.py); a message asking to recur starts recurring. False if its
        ``"every"`` is invalid (logged and counted: the message is to be set aside)."""
        try:
            recurs = self.start_recurring(key, data, encoding)
        except InvalidStartMessageError as exc:
            self.count("redis/start_messages/invalid", 1)
            logger.warning(
                "Skipping start message from %(key)s: %(reason)s: %(data)s",
                {"key": key, "reason": exc, "data": short_repr(data, 200)},
                extra=self._extra,
            )
            return False
        if recurs:
            serve_run(made)
            self.count("redis/start_messages/recurring", 1)
        return True

    def start_recurring(self, key: str | None, data: bytes, encoding: str) -> bool:
        """Whether ``data``, popped from ``key``, is a run of a recurring message; a message
        asking to recur (``"every"``) that came from a start key recurs from now on, its
        next run one interval later. InvalidStartMessageError if its ``"every"`` is not
        an interval."""
        if self.is_recurring(key):
            return True
        every = message_every(data, encoding)
        if every is None or self.recurring is None:
            return False
        self.recurring.add([data], every, first_in=every)
        return True

    def run_due_within(self, seconds: float) -> bool:
        """Whether a run of a recurring message is due within ``seconds`` by the server's
        clock (a spider idle that long stays open for it); False for 0 (it never closes),
        or while Redis is unreachable (the outage guard keeps it open)."""
        if not seconds or self.recurring is None or not self.guard.may_try():
            return False
        try:
            next_run = self.recurring.next_run()
            return (
                next_run is not None
                and next_run <= server_time_ms(self.source.server) / 1000 + seconds
            )
        except OUTAGE_ERRORS as exc:
            self.guard.failed(exc)
            return False

    def pop(self, count: int) -> tuple[str | None, list[bytes]]:
        """Up to ``count`` messages, leased until :meth:`ack`, and the key they came from."""
        key, messages, lease_ids = self.source.pop(count, self.leases)
        self.unacked.extend(lease_ids)
        self.last_popped = lease_ids
        self._last = (key, messages)
        return key, messages

    @property
    def invalid_key(self) -> str:
        """Where invalid start messages are set aside: ``<first start key>:invalid``
        (``scrapy redis export SPIDER invalid`` lists them, ``requeue --invalid`` puts
        back those valid by then)."""
        return invalid_entries_key(self.source.keys[0], is_cluster(self.source.server))

    def set_aside(self, positions: Sequence[int]) -> int:
        """Move the messages at ``positions`` (0-based) of the last pop to
        :attr:`invalid_key` and release their leases, in one script call (a worker
        dying half-way neither loses nor duplicates one); how many were moved."""
        ids = [self.last_popped[n] for n in positions]
        if not ids:
            return 0
        key, messages = self._last
        if self.recurring is not None and self.is_recurring(key):  # each run would fail
            self.recurring.cancel([messages[n] for n in positions])
        moved = self.leases.set_aside([(Lease(id_, 1), [1]) for id_ in ids], self.invalid_key)
        done = set(ids)
        self.unacked = [id_ for id_ in self.unacked if id_ not in done]
        return moved

    def ack(self) -> None:
        """Release the leases of every message popped so far (their requests are scheduled)."""
        if self.unacked:
            self.leases.ack(self.unacked)
            self.unacked = []

    def beat(self) -> None:
        """Renew the leases of messages being turned into requests; recover dead ones."""
        if not self.guard.may_try():
            return
        try:
            self.leases.renew()
            self._report(self.leases.recover_expired())
        except OUTAGE_ERRORS as exc:
            self.guard.failed(exc)
        except Exception:  # a missed heartbeat must not kill the loop
            logger.warning("Start-message heartbeat failed", exc_info=True, extra=self._extra)

    def give_back(self) -> None:
        """Put back at once every message popped and never acknowledged (the spider closes)."""
        try:
            self.leases.give_back([*self.leases.held])
        except OUTAGE_ERRORS:
            logger.error(
                "Redis is unreachable: %(count)d start messages this worker popped go back "
                "when their lease expires (SCHEDULER_WORKER_TIMEOUT)",
                {"count": len(self.leases.held)},
                extra=self._extra,
            )

    def _report(self, recovery: Recovery) -> None:
        if recovered := recovery.requeued:
            logger.info(
                "Recovered %(count)d start messages leased by workers that stopped responding",
                {"count": recovered},
                extra=self._extra,
            )
            self.count("redis/start_messages/recovered", recovered)
        if dead := recovery.dead_lettered:
            logger.error(
                "Moved %(count)d start messages to %(key)s: each was leased "
                "%(max)d times by workers that stopped responding (SCHEDULER_MAX_DELIVERIES)",
                {
                    "count": dead,
                    "key": self.leases.dead_letters_key,
                    "max": self.leases.max_deliveries,
                },
                extra=self._extra,
            )
            self.count("redis/start_messages/dead_lettered", dead)

    @property
    def _extra(self) -> dict[str, Any]:
        return {"spider": self.spider}


def check_one_slot(server: Any, keys: Sequence[str]) -> None:
    """On a Redis Cluster, several start keys are popped by one script: they must share a
    hash slot (a hash tag), or :class:`ConfigurationError` naming the fix."""
    if not one_slot(server, keys):
        raise ConfigurationError(
            f"On a Redis Cluster the start keys {list(keys)} must share a hash slot (one "
            "script pops from them in turn): give them one hash tag, e.g. redis_key = "
            "['{%(name)s}:start_urls:high', '{%(name)s}:start_urls'], or use one start key."
        )
