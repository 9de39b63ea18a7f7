"""How a worker takes requests when the fleet shares the limits per download slot.

Every request the pop script hands out may start now, or at the time the pop says (a
little later, see the last point): its slot's fleet-wide delay has passed by then and
it has an in-flight place. So the worker

* starts it at once: the local downloader slot's own delay is set to 0 as the
  request reaches it (else Scrapy would wait once more, per worker, on top of the
  fleet's delay, or as its own AutoThrottle says); and when the request
  of a slot with a delay reaches the downloader, tells Redis, which counts the
  slot's next start from then if that is later (a busy worker may start a
  request some tens of milliseconds after its pop), once the request's bytes have
  left the worker (politeness.sent); the first request of a slot
  in a worker sets up a connection first, which takes some reactor turns (many on
  a busy worker): its start is reported when it leaves the downloader;
* leases only what its downloader has room for now (CONCURRENT_REQUESTS minus
  the downloads it has running, at most SCHEDULER_PREFETCH): a request leased
  and not started would hold a fleet-wide place for nothing;
* tells the fleet what a response says about its site: a 429 or 503 with
  ``Retry-After`` holds every worker's next start of the slot until then; with
  AUTOTHROTTLE_ENABLED, the download's latency sets the slot's one delay for the
  fleet, by AutoThrottle's rules (``slot_feedback.lua``); with ROBOTSTXT_OBEY
  (Scrapy >= 2.18), the site's robots.txt Crawl-delay is the slot's least delay;
* gives every request that reaches its downloader without the scheduler (robots.txt,
  a media pipeline's, ``engine.download()``'s) a start and an in-flight place of its
  slot first (politeness.outside);
* when a pop took nothing because the slots must wait, asks the engine again
  when the earliest may start (the pop script says when), instead of polling;
* takes a request of a slot whose next start is at most SCHEDULER_FLEET_EARLY away,
  and holds it in its downloader until then (politeness.hold): the pop, the engine
  and the middlewares overlap with the slot's delay instead of adding to it;
* checks that a request going out more than a second after its start still has it
  (politeness.late): a worker stalled past the slot's wait for its report lost it.
"""

from __future__ import annotations

import time
import weakref
import zlib
from collections.abc import Collection
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from scrapy_redis.core.engine import engine_downloader, installed_reactor, wake_engine
from scrapy_redis.politeness.hold import SlotHolds, can_hold
from scrapy_redis.politeness.late import LateCheck, install_late_check
from scrapy_redis.politeness.sent import when_sent
from scrapy_redis.scheduling.pacing import DownloaderPacing, Pacer
from scrapy_redis.store.outage import OUTAGE_ERRORS

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

#: Wake the engine at most this long after a pop that found every slot waiting or full
#: (a download ending elsewhere frees a place without telling this worker).
MAX_WAIT = 1.0
#: Added to the wait: the start is allowed at that time on the server's clock.
WAIT_MARGIN = 0.002


class PolitePacing(DownloaderPacing):
    """The pacing of a worker whose queue enforces the limits for the fleet."""

    def __init__(
        self, pacer: Pacer, crawler: Crawler | None, spider: Any = None, reactor: Any = None
    ) -> None:
        super().__init__(pacer, crawler, spider, reactor)
        settings = crawler.settings if crawler is not None else None
        self.concurrency = settings.getint("CONCURRENT_REQUESTS", 16) if settings else 16
        self._wake_at: float | None = None
        #: The queues (one per lane) whose slots this worker takes requests of.
        self.queues: list[Any] = []  # SlotQueue (politeness.queue, which imports this)
        #: Handed-out requests not in the downloader yet: their slot, whether its start
        #: is reported (a slot with a delay), whether it is the first of its slot here,
        #: and when it may start (time.monotonic(): the pop's reply, or later if handed
        #: out early; None if not popped).
        self._starting: weakref.WeakKeyDictionary[Request, tuple[str, bool, bool, float | None]] = (
            weakref.WeakKeyDictionary()
        )
        #: The downloader slots held until their early requests may start.
        self._holds: SlotHolds | None = None
        #: Requests whose start is reported when they leave the downloader (the first of
        #: their slot in this worker: a connection is set up first), with their slot.
        self._leaving: weakref.WeakKeyDictionary[Request, str] = weakref.WeakKeyDictionary()
        #: Whether it reports starts (it has a crawler to be told of them by).
        self.reports = crawler is not None and getattr(crawler, "signals", None) is not None
        #: The worker's gate of the downloads outside the scheduler (politeness.outside).
        self.outside_gate: Any = None
        #: Checks that a request going out late still has its start (politeness.late).
        self.late = LateCheck(self)
        if crawler is not None and self.reports:
            from scrapy import signals

            crawler.signals.connect(self.reached, signal=signals.request_reached_downloader)
            crawler.signals.connect(self.left, signal=signals.request_left_downloader)
            crawler.signals.connect(self.responded, signal=signals.response_downloaded)
            robots_parsed = getattr(signals, "robots_parsed", None)  # Scrapy >= 2.18
            if robots_parsed is not None and crawler.settings.getbool("ROBOTSTXT_OBEY"):
                crawler.signals.connect(self.robots_parsed, signal=robots_parsed)

    def room(self) -> int:
        """How many requests its downloader can start now (CONCURRENT_REQUESTS minus its
        running downloads), at least 1, at most SCHEDULER_PREFETCH."""
        downloader = self.downloader or engine_downloader(self.crawler)
        self.downloader = downloader
        if downloader is None:
            return max(1, min(self.pacer.prefetch, 16))
        return max(1, min(self.pacer.prefetch, self.concurrency - len(downloader.active)))

    def batch_size(self) -> int:
        """The room, or what it hands out in BATCH_HORIZON if more: the pop takes the
        requests beyond the room only of slots that limit nothing (SlotQueue.room)."""
        return max(self.room(), self.pacer.size(paced=self.downloader is not None))

    def popped(self, leased: int) -> None:
        self.pacer.popped(leased)

    def holds(self) -> bool:
        """Whether it can hold a request handed out early until its start: it reports
        starts, and its downloader is Scrapy's (see politeness.hold)."""
        if self._holds is None and self.reports:
            downloader = self.downloader or engine_downloader(self.crawler)
            if downloader is not None and can_hold(downloader):
                crawler = self.crawler
                reactor = self.reactor or installed_reactor()
                spider = lambda: getattr(crawler, "spider", None)  # noqa: E731
                self._holds = SlotHolds(downloader, reactor, spider)
        return self._holds is not None

    def skipped(self, handed: bool) -> None:
        return None

    def held_back(self, request: Request) -> bool:
        """Never: the fleet allowed it (now, or at the time its pop said: then it is
        held in the downloader, see :meth:`reached`). When it reaches the downloader, its
        local slot's delay is set to 0, and the start of a slot with a delay is reported
        (see :meth:`reached`)."""
        try:
            key = self.downloader.get_slot_key(request)
        except Exception:  # a downloader unlike Scrapy's: nothing to set
            return False
        queue = self.queue_of(key)
        delayed = queue is not None and (
            key in queue.delayed_slots or queue.limits.of(key).delay > 0
        )
        # no local slot yet: the first request of the slot here, which sets up a connection
        fresh = key not in getattr(self.downloader, "slots", {})
        start_at = queue.start_at.pop(request, None) if queue is not None else None
        self._starting[request] = (key, delayed, fresh, start_at)
        return False

    def handed_out(self, request: Request) -> bool:
        """Whether ``request`` was handed out by the scheduler and is not in the
        downloader yet."""
        return request in self._starting

    def lending(self) -> Collection[Request]:
        """The handed-out requests whose in-flight place a download outside the
        scheduler uses (politeness.outside): not done before it has left the downloader."""
        gate = self.outside_gate
        return gate.lending() if gate is not None else ()

    def unsent(self, slot: str) -> list[Request]:
        """The requests of ``slot`` handed out and not in the downloader yet."""
        return [r for r, (key, *_) in list(self._starting.items()) if key == slot]

    def will_start(self, request: Request, slot: str, delayed: bool) -> None:
        """``request`` (of ``slot``, with a delay if ``delayed``) took a start of the slot:
        reported as a popped request's (see :meth:`reached`)."""
        fresh = slot not in getattr(self.downloader, "slots", {})
        self._starting[request] = (slot, delayed, fresh, time.monotonic())

    def _no_local_delay(self, key: str) -> None:
        """The worker's own slot ``key`` starts what reaches it at once (AutoThrottle's
        local adjustment included: the fleet's delay holds instead)."""
        slot = getattr(self.downloader, "slots", {}).get(key)
        if slot is not None and getattr(slot, "delay", None):
            slot.delay = 0

    def queue_of(self, slot: str) -> Any:
        """The queue (lane) holding ``slot``'s requests."""
        queues = self.queues
        if len(queues) <= 1:
            return queues[0] if queues else None
        return queues[zlib.crc32(slot.encode()) % len(queues)]  # as lanes.lane_of()

    def reached(self, request: Request, spider: Any = None) -> None:
        """Scrapy's ``request_reached_downloader``: a request of a slot with a delay
        starts now, maybe a little after the pop allowed it (a busy worker): the slot's
        next start is counted from when its bytes have left (one script call; lost in
        an outage, when the pop's time stands). One handed out before its start is held
        in its downloader slot until then (politeness.hold), and watched from then; one
        going late checks that its start is still its own first (politeness.late)."""
        key, report, fresh, start_at = self._starting.pop(request, (None, False, False, None))
        if key is None:
            return
        self._no_local_delay(key)  # (sent before the downloader's slot takes it)
        watch: Any = None
        if report and fresh:
            # its bytes leave once a connection is set up, some reactor turns later (many
            # on a busy worker): counted from its response, to be sure
            self._leaving[request] = key
        elif report:
            # once its bytes have left (politeness.sent): a report before, then the
            # worker descheduled, let another worker's next request come too soon
            reactor = self.reactor or installed_reactor()
            report_it = partial(self._report, key, request)
            watch = partial(when_sent, reactor, self.downloader, request, key, report_it)
        go = watch or (lambda: None)
        local = request.meta.get("download_slot", key)  # (the downloader just set it)
        if report and start_at is not None:  # a start it may have lost if late (late.py)
            go = partial(self.late.go, request, key, local, start_at, go)
        holds = self._holds
        # handed out early: its downloader slot lets it go at its start, then watches it
        early = start_at is not None and start_at > time.monotonic()
        if early and holds is not None and start_at is not None and holds.hold(local, start_at, go):
            return
        go()

    def left(self, request: Request, spider: Any = None) -> None:
        """Scrapy's ``request_left_downloader``: the start of the first request of a
        slot in this worker is reported now (see :meth:`reached`)."""
        key = self._leaving.pop(request, None)
        if key is not None:
            self._report(key, request)

    def responded(self, response: Any, request: Request, spider: Any = None) -> None:
        """Scrapy's ``response_downloaded`` (before the downloader middlewares: a 429
        the retry middleware turns into a retry is seen too): a Retry-After of a 429
        or 503 slows the slot for the whole fleet; with AutoThrottle, the latency sets
        the fleet's delay."""
        key = request.meta.get("download_slot")
        queue = self.queue_of(key) if isinstance(key, str) else None
        if queue is None or not isinstance(key, str):
            return
        try:
            wait = retry_after(response)
            if wait:
                queue.retry_after(key, wait)
                if self._holds is not None:  # a request of it held here waits too
                    self._holds.extend(key, time.monotonic() + wait)
            throttle = queue.limits.throttle
            latency = request.meta.get("download_latency")
            adjust = not request.meta.get("autothrottle_dont_adjust_delay")
            if throttle is not None and latency is not None and adjust:
                queue.latency(key, float(latency), response.status == 200, throttle)
        except OUTAGE_ERRORS:
            pass

    def robots_parsed(self, robotparser: Any, request: Request, **kwargs: Any) -> None:
        """Scrapy's ``robots_parsed`` (ROBOTSTXT_OBEY): the site's Crawl-delay for the
        user agent Scrapy checks robots.txt with is the slot's least delay, fleet-wide."""
        crawler = self.crawler
        assert crawler is not None
        settings = crawler.settings
        agent = settings.get("ROBOTSTXT_USER_AGENT") or request.headers.get(
            b"User-Agent", settings.get("USER_AGENT")
        )
        if isinstance(agent, bytes):
            agent = agent.decode("latin-1")
        try:
            delay = robotparser.crawl_delay(agent)
        except Exception:  # a parser without it, or a bad value
            delay = None
        queue = self.queues[0] if self.queues else None
        if delay is None or queue is None:
            return
        key = queue.limits.slot_of(request)
        target = self.queue_of(key)
        try:
            if target is not None:
                target.crawl_delay(key, float(delay))
        except OUTAGE_ERRORS:
            return
        if target is not None and float(delay) > 0 and self.outside_gate is not None:
            self.outside_gate.robots.delay_learned(key)

    def _report(self, key: str, request: Request) -> None:
        """The start of ``request`` (of slot ``key``) is reported, under its id: it ends
        the slot's wait for a report only if the slot's unreported start is its own."""
        queue = self.queue_of(key)
        try:
            if queue is not None:
                queue.started(key, queue.ids.get(request))
        except OUTAGE_ERRORS:
            pass

    def wake_in(self, seconds: float | None) -> None:
        """Ask the engine for requests again in ``seconds`` (None: :data:`MAX_WAIT`)."""
        wait = MAX_WAIT if seconds is None else min(MAX_WAIT, seconds + WAIT_MARGIN)
        reactor = self.reactor or installed_reactor()
        at = reactor.seconds() + wait
        call = self._wake_call
        if call is not None and call.active():
            if self._wake_at is not None and self._wake_at <= at:
                return
            call.cancel()
        self._wake_at = at
        self._wake_call = reactor.callLater(wait, wake_engine, self.crawler)


def polite_pacing(scheduler: Any, pacer: Pacer) -> PolitePacing | None:
    """The pacing of a scheduler whose queue (or lanes) is per slot, told when to wake."""
    queue = scheduler.queue
    queues = list(getattr(queue, "lanes", None) or [queue])
    if not all(getattr(q, "paced_by_the_fleet", False) for q in queues):
        return None
    pacing = PolitePacing(pacer, scheduler.crawler, scheduler.spider, scheduler.reactor)
    pacing.queues = queues
    for q in queues:
        q.on_wait = pacing.wake_in
        q.room = pacing.room
        q.reports_starts = pacing.reports
        q.holds = pacing.holds
    if pacing.reports:
        from scrapy_redis.politeness.outside import install_outside_gate

        install_outside_gate(pacing, scheduler.worker_id, scheduler.worker_timeout)
        install_late_check(pacing)  # (the last: after the gate's own starts)
    return pacing


#: The longest Retry-After honoured (seconds): a site asking for more is retried then.
MAX_RETRY_AFTER = 3600.0


def retry_after(response: Any) -> float:
    """Seconds a 429 or 503 response's ``Retry-After`` asks to wait (seconds, or an HTTP
    date, read against this worker's clock), at most :data:`MAX_RETRY_AFTER`; 0 if none."""
    if getattr(response, "status", None) not in (429, 503):
        return 0.0
    value = response.headers.get(b"Retry-After")
    if not value:
        return 0.0
    text = value.decode("latin-1").strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return 0.0
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - datetime.now(timezone.utc)).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)
