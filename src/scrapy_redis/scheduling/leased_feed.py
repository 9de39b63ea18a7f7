"""Requests leased from our queues: prefetched in batches, released when done.

One pop script call leases up to SCHEDULER_PREFETCH requests (sized by pacing,
see pacing.py) and releases the leases of the requests the engine is done with.
A request is done when the engine no longer holds it (see
:func:`scrapy_redis.core.engine.engine_in_progress`). Undecodable entries are moved
to ``<queue>:invalid``; entries that look like pickle stop the worker and stay
in the queue. See :mod:`scrapy_redis.queues.leases` for the lease model and
:mod:`scrapy_redis.scheduling.feeds` for the protocol this implements.
"""

from __future__ import annotations

import gc
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from scrapy_redis.connection import is_cluster
from scrapy_redis.core.engine import EVERY_LIVE_REQUEST, engine_in_progress
from scrapy_redis.exceptions import UndecodableRequestError
from scrapy_redis.queue import Entry
from scrapy_redis.scheduling.feeds import (
    MAX_SKIPS,
    HandedOut,
    by_lease,
    queue_flush_keys,
    queue_has_requests,
    queue_key_types,
)
from scrapy_redis.store.keys import invalid_entries_key

if TYPE_CHECKING:
    from scrapy import Request

    from scrapy_redis.queues.leases import Lease, LeaseBook
    from scrapy_redis.scheduling.context import SchedulerContext
    from scrapy_redis.scheduling.pacing import DownloaderPacing

logger = logging.getLogger("scrapy_redis.scheduler")  # the scheduler's parts log as the scheduler

#: How many held-back prefetched requests one hand-out looks past (see pacing.py).
MAX_HELD = 32


class LeasedFeed:
    """Leased requests of one worker: prefetched, handed out, invalid ones to set aside."""

    def __init__(
        self,
        context: SchedulerContext,
        book: LeaseBook,
        pacing: DownloaderPacing,
        send_children: Callable[[], object],
    ) -> None:
        self.context = context
        self.counts = context.counts
        self.book = book
        self.pacing = pacing
        #: Sends the requests this worker has buffered (raises what Redis raises).
        self.send_children = send_children
        # Leased, not handed out yet: each entry (or the request decoded from it, held
        # back by pacing) with its lease and position in it.
        self._prefetched: deque[tuple[Entry | Request, Lease, int]] = deque()
        # Handed to the engine, not done yet (see HandedOut).
        self._leased: set[HandedOut] = set()
        # Undecodable entries not set aside yet (Redis was unreachable), with the error.
        self._invalid: list[tuple[Entry, Lease, int, str]] = []

    def next(self) -> Request | None:
        if self._prefetched:
            request = self._hand_out()
            if request is not None or self._prefetched:
                return request  # None with requests prefetched: held back (pacing)
        return self.context.calls.call(self._pop, None)

    def holding(self) -> int:
        return len(self._prefetched)

    def in_hand(self) -> int:
        return len(self._leased) + len(self._prefetched)

    def has_requests(self) -> bool:
        return queue_has_requests(self.context.queue)

    def others_hold_leases(self) -> bool:
        return self.book.count_all() > len(self.book.held)

    def work_elsewhere(self) -> bool:
        if self.has_requests():
            return True
        self.release_done()
        return self.others_hold_leases()

    def flush_keys(self) -> list[str]:
        return queue_flush_keys(self.context.queue) + self.book.flush_keys

    def key_types(self) -> list[tuple[str, str]]:
        book = self.book
        return [
            *queue_key_types(self.context.queue),
            (book.leases_key, "hash"),
            (book.deadlines_key, "zset"),
            (book.deliveries_key, "hash"),
            (book.dead_letters_key, "list"),
        ]

    def clear(self) -> None:
        self.context.queue.clear()
        self.book.clear()
        self._prefetched.clear()
        self._invalid.clear()

    # -- popping and handing out -------------------------------------------------------

    def _pop(self) -> Request | None:
        context = self.context
        self.send_children()  # also ends an outage: the other components write what they kept
        if context.calls.guard.down or context.calls.halted:
            return None
        if self._invalid:
            self._set_aside_invalid()
        for _ in range(MAX_SKIPS):
            if not self._prefetched and not self._refill():
                return None
            request = self._hand_out()
            if request is not None or context.calls.halted or self._prefetched:
                return request  # None with requests prefetched: held back (pacing)
        return None

    def _refill(self) -> bool:
        """Lease the next requests and release the done ones, in one script call;
        whether it leased any."""
        context = self.context
        context.counts.flush_dequeued()
        done = self._done_before_release()
        ticket = self.book.ticket(releases=by_lease((h.lease, h.position) for h in done))
        entries = context.queue.pop_entries(self.pacing.batch_size(), ticket=ticket)
        self.pacing.popped(len(entries))
        lease = self.book.taken_batch(ticket, len(entries))
        self._released(done)
        context.counts.leases("leased", len(entries))
        if lease is not None:
            self._prefetched.extend((entry, lease, n) for n, entry in enumerate(entries, 1))
        return bool(entries)

    def _hand_out(self) -> Request | None:
        """The next prefetched request; undecodable entries are set aside (or halt).

        A request whose downloader slot has enough to start for now is held back
        (see pacing.py) and the next ones are tried, up to MAX_HELD of them. None
        with requests still prefetched: all those tried are held back.
        """
        held: list[tuple[Request, Lease, int]] = []
        request, pacing, calls = None, self.pacing, self.context.calls
        while self._prefetched and not calls.halted and len(held) < MAX_HELD:
            entry, lease, position = self._prefetched.popleft()
            if isinstance(entry, Entry):
                try:
                    request = self.context.queue.decode(entry)
                except UndecodableRequestError as exc:
                    self._prefetched.extendleft(reversed(held))  # given back if it halts
                    self._undecodable(entry, lease, position, exc)
                    if held:
                        return None
                    continue
            else:
                request = entry  # decoded already, then held back
            if pacing.downloader is None or not pacing.held_back(request):
                self._leased.add(HandedOut.of(request, lease, position))
                self.counts.uncounted += 1
                break
            held.append((request, lease, position))
            request = None
        if held:
            self._prefetched.extendleft(reversed(held))
            pacing.skipped(handed=request is not None)
        return request

    def _undecodable(
        self, entry: Entry, lease: Lease, position: int, exc: UndecodableRequestError
    ) -> None:
        calls = self.context.calls
        if exc.looks_like_pickle:  # wrong SCHEDULER_SERIALIZER: leave the queue as it is
            self._prefetched.appendleft((entry, lease, position))
            calls.halt(exc)
            calls.call(self._give_back_prefetched, None)
            return
        self._invalid.append((entry, lease, position, str(exc)))
        self._set_aside_invalid()

    def _set_aside_invalid(self) -> None:
        """Move undecodable entries to ``<queue>:invalid`` and release them; those that
        Redis was unreachable for wait here (retried on the next pop and heartbeat,
        given back at close)."""
        queue = self.context.queue
        book, key = self.book, invalid_entries_key(queue.key, is_cluster(queue.server))
        while self._invalid:
            _, lease, position, error = self._invalid[0]

            def set_aside(lease: Lease = lease, n: int = position) -> bool:
                book.set_aside([(lease, [n])], key)
                return True

            if not self.context.calls.call(set_aside, False):
                return
            del self._invalid[0]
            self.context.counts.invalid()
            logger.error(
                "%(error)s Moved it to %(key)s.",
                {"error": error, "key": key},
                extra={"spider": self.context.spider},
            )

    # -- releasing and giving back -------------------------------------------------------

    def _done_requests(self, collect: bool = False) -> list[HandedOut]:
        """The handed-out requests the engine is done with (freed ones included), but
        those whose in-flight place a download still uses (``pacing.lending()``).

        Under a Scrapy without the engine's set of requests in progress, only freed
        ones (see _engine.engine_in_progress); ``collect``: first free those held by
        reference cycles only (on the heartbeat and at close).
        """
        if not self._leased:
            return []
        in_progress = engine_in_progress(self.context.crawler)
        if in_progress is None:  # no engine: nothing is known to be done
            return []
        if collect and in_progress is EVERY_LIVE_REQUEST:
            gc.collect()
        lending = self.pacing.lending()  # (their place is in use: kept until it is not)
        return [
            h
            for h in self._leased
            if (request := h()) is None or (request not in in_progress and request not in lending)
        ]

    def _done_before_release(self, collect: bool = False) -> list[HandedOut]:
        """The done requests, once the requests they produced are in Redis: a lease is
        released only after what its request produced was pushed (or the release waits:
        this raises what Redis raises)."""
        done = self._done_requests(collect)
        if done:
            self.send_children()
        return done

    def _released(self, done: list[HandedOut]) -> None:
        """The leases of ``done`` were released."""
        self._leased.difference_update(done)
        self.context.counts.leases("acked", len(done))
        if done and not self.book.held:
            self.context.news.publish("idle")

    def release_done(self, collect: bool = False) -> None:
        """Release the leases of the requests the engine is done with."""
        if done := self._done_before_release(collect):
            self.book.release(by_lease((h.lease, h.position) for h in done))
            self._released(done)

    def _give_back_prefetched(self) -> None:
        """Put back at once what this halted worker leased and did not hand out; kept
        (and tried again on the heartbeat and at close) until Redis took it."""
        self.book.give_back_entries(by_lease((lease, n) for _, lease, n in self._prefetched))
        self._prefetched.clear()

    def give_back_all(self) -> None:
        self.release_done(collect=True)
        if not (self._leased or self._prefetched or self._invalid):
            return
        back = [
            *((handed.lease, handed.position) for handed in self._leased),
            *((lease, n) for _, lease, n in self._prefetched),
            *((lease, n) for _, lease, n, _ in self._invalid),  # another worker sets it aside
        ]
        returned = self.book.give_back_entries(by_lease(back))
        self._leased.clear()
        self._prefetched.clear()
        self._invalid.clear()
        self.context.counts.leases("returned", returned)
        if returned:
            self.context.news.publish("returned")

    # -- the heartbeat ---------------------------------------------------------------------

    def maintain(self) -> None:
        if self._invalid:
            self._set_aside_invalid()
        if self.context.calls.halted and self._prefetched:
            self._give_back_prefetched()
        self.release_done(collect=True)
        self.book.renew()
        self.recover()

    def recover(self) -> None:
        """Put back the requests leased by workers that died; those that every worker
        taking them died with go to the dead letters."""
        recovered, dead = self.book.recover_expired()
        spider = self.context.spider
        if recovered:
            logger.info(
                "Recovered %(count)d requests leased by workers that stopped responding",
                {"count": recovered},
                extra={"spider": spider},
            )
            self.context.counts.leases("recovered", recovered)
        if dead:
            logger.error(
                "Moved %(count)d requests to %(key)s: each was leased %(max)d times by workers "
                "that stopped responding (SCHEDULER_MAX_DELIVERIES). See 'Dead letters' in the "
                "scheduler docs to look at them and requeue them.",
                {"count": dead, "key": self.book.dead_letters_key, "max": self.book.max_deliveries},
                extra={"spider": spider},
            )
            self.context.counts.leases("dead_lettered", dead)
        if recovered:  # last: what was recovered is logged and counted even if it fails
            self.context.news.publish("recovered")
