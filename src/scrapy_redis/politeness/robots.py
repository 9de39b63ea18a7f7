"""robots.txt within the fleet's limits (SCHEDULER_FLEET_LIMITS with ROBOTSTXT_OBEY).

Scrapy's RobotsTxtMiddleware fetches each site's robots.txt in every worker, through
``engine.download()``: outside the scheduler, so no pop counted it. It fetches it when
the first request of the site reaches it, a request the scheduler handed out with a
start of its slot counted, which then waits for robots.txt. :class:`RobotsGate` (the
last ``process_request`` of the worker's downloader middlewares, added when the
scheduler opens; Scrapy's own middlewares are unchanged) gives robots.txt a start of
its slot from Redis before it reaches the downloader (``slot_take.lua``), waiting (the
reactor runs meanwhile) until the fleet allows one:

* if requests of the slot that this worker popped wait for it (the one that made
  RobotsTxtMiddleware fetch it, at least), robots.txt uses the in-flight place of one
  of them (they are not sent before it is done), and the start of theirs that the slot
  waits the report of, if any: it goes now, in its stead. Each of those requests (of a
  slot with a delay) then takes a start again, without a new place, before it reaches
  the downloader: its own start was used, or went by while it waited;
* otherwise (robots.txt of a site fetched for a request of another slot, or for a
  request that came from ``engine.download()``) it takes an in-flight place too, under a
  lease of its own (a ``place`` record: the lease's renewal, release and recovery give
  the place back, a dead worker's once its lease expires).

Its start is reported as a popped request's is (politeness.pacing), once its bytes
have left. In an outage the request goes without.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.task import deferLater

from scrapy_redis.core.engine import engine_downloader, installed_reactor
from scrapy_redis.queues.leases import LeaseBook
from scrapy_redis.store.outage import OUTAGE_ERRORS

if TYPE_CHECKING:
    from scrapy import Request

logger = logging.getLogger("scrapy_redis.scheduler")

#: Seconds between two asks for a place of a slot at its concurrency.
FULL_WAIT = 0.25
#: The longest wait between two asks (seconds).
MAX_WAIT = 1.0


def is_robots(request: Request) -> bool:
    """Whether ``request`` is a robots.txt fetch of RobotsTxtMiddleware."""
    return bool(request.meta.get("dont_obey_robotstxt")) and (
        urlparse_cached(request).path == "/robots.txt"
    )


class RobotsGate:
    """Each robots.txt a worker fetches takes a start of its slot (see the module's doc)."""

    def __init__(self, pacing: Any, worker_id: str, timeout: float) -> None:
        #: The worker's PolitePacing (politeness.pacing, which imports this module).
        self.pacing = pacing
        self.worker_id = f"{worker_id}~robots"
        self.timeout = timeout
        #: A lease book per lane (queue key), for the places taken with a lease.
        self.books: dict[str, LeaseBook] = {}
        #: Popped requests whose start robots.txt used: they take one again, of this slot.
        self.again: weakref.WeakKeyDictionary[Request, str] = weakref.WeakKeyDictionary()
        #: robots.txt requests of slots with a delay, until they leave the downloader.
        self.fetching: weakref.WeakKeyDictionary[Request, str] = weakref.WeakKeyDictionary()
        #: Requests holding a leased place: the book and the lease id.
        self.places: weakref.WeakKeyDictionary[Request, tuple[LeaseBook, str]] = (
            weakref.WeakKeyDictionary()
        )
        self._renewal: Any = None
        pacing.robots_gate = self

    async def process_request(self, request: Request, spider: Any = None) -> None:
        """A downloader middleware's: returns once ``request`` may start."""
        if is_robots(request) and not self.pacing.handed_out(request):
            await self._robots(request)
        elif request in self.again:
            await self._start_again(request, self.again.pop(request))

    async def _robots(self, request: Request) -> None:
        pacing = self.pacing
        slot = pacing.queues[0].limits.slot_of(request)
        queue = pacing.queue_of(slot)
        delayed = slot in queue.delayed_slots or queue.limits.of(slot).delay > 0
        if delayed:
            self.fetching[request] = slot
        waiting = self._waiting(slot)
        netloc = urlparse_cached(request).netloc
        lends = any(urlparse_cached(popped).netloc == netloc for popped in waiting)
        book = None if lends else self._book(queue)
        ticket = None if book is None else book.ticket()
        ids = [queue.ids[popped] for popped in waiting if popped in queue.ids]
        own = queue.ids[request] = uuid.uuid4().hex[:24]  # (its start's report names it)
        started = await self._until_started(queue, slot, own, ids, ticket)
        if started and book is not None and ticket is not None:
            self.places[request] = (book, book.taken(ticket, 1)[0])
            self._renew_later()
        pacing.will_start(request, slot, delayed)

    def _waiting(self, slot: str) -> list[Request]:
        """The popped requests of ``slot`` not in the downloader yet; if a robots.txt of
        the slot is being fetched, each will take a start again (its own start went by
        while it waited for robots.txt, or robots.txt used it)."""
        waiting = [r for r in self.pacing.unsent(slot) if not is_robots(r)]
        if slot in self.fetching.values():
            for popped in waiting:
                self.again[popped] = slot
        return waiting

    def delay_learned(self, slot: str) -> None:
        """The Crawl-delay of ``slot``'s site was just read from its robots.txt: the
        requests of the slot handed out before it was known (their starts counted no
        delay) and waiting for robots.txt take a start again, under it."""
        for popped in self.pacing.unsent(slot):
            if not is_robots(popped):
                self.again[popped] = slot

    async def _start_again(self, request: Request, slot: str) -> None:
        queue = self.pacing.queue_of(slot)
        request_id = queue.ids.get(request)
        # its own start, if the slot still waits for its report: nothing went since, it
        # goes (a popped request's start was counted at its pop: not counted again)
        held: tuple[str, ...] = (request_id,) if request_id else ()
        if request_id is None:  # (not popped: a start of its own)
            request_id = queue.ids[request] = uuid.uuid4().hex[:24]
        await self._until_started(queue, slot, request_id, held, None)
        self.pacing.will_start(request, slot, True)

    async def _until_started(
        self, queue: Any, slot: str, request_id: str, held: Sequence[str], ticket: Any
    ) -> bool:
        """Ask until the slot gives a start (True), or Redis cannot be reached (False)."""
        while True:
            try:
                wait = queue.take_start(slot, request_id, held, ticket)
            except OUTAGE_ERRORS:
                return False
            if wait == 0:
                return True
            seconds = FULL_WAIT if wait is None else min(MAX_WAIT, wait)
            reactor = self.pacing.reactor or installed_reactor()
            await maybe_deferred_to_future(deferLater(reactor, seconds, lambda: None))

    def _book(self, queue: Any) -> LeaseBook:
        book = self.books.get(queue.key)
        if book is None:
            book = LeaseBook(queue.server, queue.key, self.worker_id, self.timeout)
            self.books[queue.key] = book
        return book

    def left(self, request: Request, spider: Any = None) -> None:
        """Scrapy's ``request_left_downloader``: a leased place is given back; the
        requests of a robots.txt's slot that wait for it take a start again."""
        slot = self.fetching.get(request)
        if slot is not None:
            self._waiting(slot)
            del self.fetching[request]
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


def install_robots_gate(pacing: Any, worker_id: str, timeout: float) -> Any:
    """Add a :class:`RobotsGate` to the crawler's downloader, as its last
    ``process_request``; None (and a warning) if that downloader has no middlewares."""
    crawler = pacing.crawler
    downloader = engine_downloader(crawler)
    methods = getattr(getattr(downloader, "middleware", None), "methods", None)
    if crawler is None or not isinstance(methods, dict) or "process_request" not in methods:
        logger.warning(
            "SCHEDULER_FLEET_LIMITS: the downloader has no middlewares to add the robots.txt "
            "gate to: each worker's robots.txt requests are not counted in the sites' limits."
        )
        return None
    gate = RobotsGate(pacing, worker_id, timeout)
    methods["process_request"].append(gate.process_request)
    from scrapy import signals

    crawler.signals.connect(gate.left, signal=signals.request_left_downloader)
    crawler.signals.connect(gate.close, signal=signals.spider_closed)
    return gate
