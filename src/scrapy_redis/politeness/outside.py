"""Downloads outside the scheduler within the fleet's limits (SCHEDULER_FLEET_LIMITS).

Some requests reach a worker's downloader without the scheduler, so no pop counted
them: the robots.txt Scrapy's RobotsTxtMiddleware fetches, a media pipeline's files and
images (FilesPipeline, ImagesPipeline), a spider's or an extension's own
``engine.download_async()`` (or ``download()``) and what they are redirected to or
retried as there, the requests the serializer refused (kept in the worker's memory).
:class:`OutsideGate` (the last ``process_request`` of the worker's downloader
middlewares, added when the scheduler opens; Scrapy's own middlewares are unchanged)
gives each of them a start of its slot from Redis before it reaches the downloader
(``slot_take.lua``), waiting (the reactor runs meanwhile) until the fleet allows one:
the slot's delay since its last start has passed, no start waits for its report, and
it has an in-flight place. A response served before (``HTTPCACHE``) takes nothing.

Its in-flight place is, the first that applies:

* for a robots.txt, the place of the popped requests of its site that wait for it
  (politeness.robots: they are not sent before it is done);
* the place of a request of its slot that this worker popped, that has left the
  downloader and that the engine still works on (its callback, the item pipelines),
  not lent to another: a media pipeline's file waits for a place while its page,
  which waits for the file, holds one; with a place of their own, pages waiting for
  their files would hold every place of the slot and the files would wait for ever.
  That request's lease (and place) is not released before the download has left the
  downloader (:meth:`OutsideGate.lending`);
* else a place of its own, under a lease (a ``place`` record: the lease's renewal,
  release and recovery give the place back, a dead worker's once its lease expires).

Its start is reported as a popped request's is (politeness.pacing), once its bytes
have left. In an outage the request goes without.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
import weakref
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.task import deferLater

from scrapy_redis.core.engine import engine_downloader, engine_in_progress, installed_reactor
from scrapy_redis.politeness.robots import RobotsWaits, is_robots
from scrapy_redis.queues.leases import LeaseBook
from scrapy_redis.store.outage import OUTAGE_ERRORS

if TYPE_CHECKING:
    from scrapy import Request

logger = logging.getLogger("scrapy_redis.scheduler")

#: Seconds between two asks for a place of a slot at its concurrency.
FULL_WAIT = 0.25
#: The longest wait between two asks (seconds).
MAX_WAIT = 1.0


class OutsideGate:
    """Each download outside the scheduler takes a start of its slot (see the module's doc)."""

    def __init__(self, pacing: Any, worker_id: str, timeout: float) -> None:
        #: The worker's PolitePacing (politeness.pacing, which imports this module).
        self.pacing = pacing
        self.worker_id = f"{worker_id}~outside"
        self.timeout = timeout
        #: The popped requests waiting for a robots.txt of their slot.
        self.robots = RobotsWaits(pacing)
        #: A lease book per lane (queue key), for the places taken with a lease.
        self.books: dict[str, LeaseBook] = {}
        #: Requests holding a leased place: the book and the lease id.
        self.places: weakref.WeakKeyDictionary[Request, tuple[LeaseBook, str]] = (
            weakref.WeakKeyDictionary()
        )
        #: Downloads using the place of a popped request (the value) until they leave.
        self.lent: weakref.WeakKeyDictionary[Request, Request] = weakref.WeakKeyDictionary()
        #: Popped requests that have left the downloader: their slot.
        self.landed: weakref.WeakKeyDictionary[Request, str] = weakref.WeakKeyDictionary()
        #: The downloads that took a start here under an id of their own (in the queue's
        #: ``ids`` too, so that their start's report names them): not popped.
        self.own: weakref.WeakSet[Request] = weakref.WeakSet()
        self._renewal: Any = None
        pacing.outside_gate = self

    async def process_request(self, request: Request, spider: Any = None) -> None:
        """A downloader middleware's: returns once ``request`` may start."""
        if request in self.robots.again:
            await self._start_again(request, self.robots.again.pop(request))
        elif not self.pacing.handed_out(request):
            await self._outside(request)

    async def _outside(self, request: Request) -> None:
        pacing = self.pacing
        slot = pacing.queues[0].limits.slot_of(request)
        queue = pacing.queue_of(slot)
        delayed = slot in queue.delayed_slots or queue.limits.of(slot).delay > 0
        held = self.robots.lenders(request, slot, delayed, queue) if is_robots(request) else None
        request_id, ticket = self._own_id(queue, request), None
        while True:
            borrows = held is not None or self._borrow(request, slot)
            ticket = None if borrows else (ticket or self._book(queue).ticket())
            try:
                wait = queue.take_start(slot, request_id, held or (), ticket)
            except OUTAGE_ERRORS:
                break
            if wait == 0:
                if ticket is not None:
                    book = self._book(queue)
                    self.places[request] = (book, book.taken(ticket, 1)[0])
                    self._renew_later()
                break
            await self._pause(FULL_WAIT if wait is None else wait)
        pacing.will_start(request, slot, delayed)

    def _borrow(self, request: Request, slot: str) -> bool:
        """Whether ``request`` uses the place of a popped request of ``slot`` (see the
        module's doc): one it borrowed already, or one free to lend now."""
        if request in self.lent:
            return True
        in_progress = engine_in_progress(self.pacing.crawler)
        if in_progress is None:
            return False
        lending = self.lending()
        for popped, key in list(self.landed.items()):
            if popped not in in_progress:  # done: its lease is released
                self.landed.pop(popped, None)
            elif key == slot and popped not in lending:
                self.lent[request] = popped
                return True
        return False

    def lending(self) -> Collection[Request]:
        """The popped requests whose place a download uses: their leases are kept."""
        return set(self.lent.values())

    async def _start_again(self, request: Request, slot: str) -> None:
        """A popped request whose start a robots.txt used (politeness.robots)."""
        queue = self.pacing.queue_of(slot)
        request_id = queue.ids.get(request)
        # its own start, if the slot still waits for its report: nothing went since, it
        # goes (a popped request's start was counted at its pop: not counted again)
        held: tuple[str, ...] = (request_id,) if request_id else ()
        if request_id is None:  # (not popped: a start of its own)
            request_id = self._own_id(queue, request)
        while True:
            try:
                wait = queue.take_start(slot, request_id, held)
            except OUTAGE_ERRORS:
                break
            if wait == 0:
                break
            await self._pause(FULL_WAIT if wait is None else wait)
        self.pacing.will_start(request, slot, True)

    def _own_id(self, queue: Any, request: Request) -> str:
        """A new id for ``request``'s start, by which its report names it."""
        request_id = queue.ids[request] = uuid.uuid4().hex[:24]
        self.own.add(request)
        return request_id

    async def _pause(self, seconds: float) -> None:
        reactor = self.pacing.reactor or installed_reactor()
        await maybe_deferred_to_future(deferLater(reactor, min(MAX_WAIT, seconds), lambda: None))

    def _book(self, queue: Any) -> LeaseBook:
        book = self.books.get(queue.key)
        if book is None:
            book = LeaseBook(queue.server, queue.key, self.worker_id, self.timeout)
            self.books[queue.key] = book
        return book

    def left(self, request: Request, spider: Any = None) -> None:
        """Scrapy's ``request_left_downloader``: a leased or borrowed place is given back
        (a popped request that left may lend its own); the requests of a robots.txt's
        slot that wait for it take a start again."""
        self.robots.left(request)
        self.lent.pop(request, None)
        key = request.meta.get("download_slot")  # (set by the downloader)
        queue = self.pacing.queue_of(key) if isinstance(key, str) else None
        popped = queue is not None and request in queue.ids and request not in self.own
        if isinstance(key, str) and popped:
            self.landed[request] = key  # popped: it may lend its place now
        found = self.places.pop(request, None)
        if found is not None:
            book, lease_id = found
            try:
                book.ack([lease_id])
            except OUTAGE_ERRORS:  # recovered by a worker once it expires
                book.held.discard(lease_id)

    def _renew_later(self) -> None:
        if self._renewal is None or not self._renewal.active():
            reactor = self.pacing.reactor or installed_reactor()
            self._renewal = reactor.callLater(self.timeout / 3, self._renew)

    def _renew(self) -> None:
        """Push back the deadlines of the leased places still held, every third of
        SCHEDULER_WORKER_TIMEOUT while there are."""
        self._renewal = None
        for book in self.books.values():
            with contextlib.suppress(*OUTAGE_ERRORS):
                book.renew()
        if any(book.held for book in self.books.values()):
            self._renew_later()

    def close(self, spider: Any = None) -> None:
        """Give back the places still held (the crawl stops)."""
        if self._renewal is not None and self._renewal.active():
            self._renewal.cancel()
        for book in self.books.values():
            with contextlib.suppress(*OUTAGE_ERRORS):  # else recovered once they expire
                book.give_back(list(book.held))


def install_outside_gate(pacing: Any, worker_id: str, timeout: float) -> OutsideGate | None:
    """Add an :class:`OutsideGate` to the crawler's downloader, as its last
    ``process_request``; None (and a warning) if that downloader has no middlewares."""
    crawler = pacing.crawler
    downloader = engine_downloader(crawler)
    methods = getattr(getattr(downloader, "middleware", None), "methods", None)
    if crawler is None or not isinstance(methods, dict) or "process_request" not in methods:
        logger.warning(
            "SCHEDULER_FLEET_LIMITS: the downloader has no middlewares to add the gate of "
            "the downloads outside the scheduler to: each worker's robots.txt, media "
            "pipeline and engine.download() requests are not counted in the sites' limits."
        )
        return None
    gate = OutsideGate(pacing, worker_id, timeout)
    methods["process_request"].append(gate.process_request)
    from scrapy import signals

    crawler.signals.connect(gate.left, signal=signals.request_left_downloader)
    crawler.signals.connect(gate.close, signal=signals.spider_closed)
    return gate
