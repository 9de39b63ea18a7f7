"""A request that goes out late checks first that its slot's start is still its own.

A start of a slot with a delay waits for its worker's report (``slot_started.lua``) at
most the delay plus REPORT_GRACE (3 s, ``_slots.lua``) after it; then the slot lets
another worker start (the worker may have died). A worker stalled that long between its
pop (or the start an early pop gave it) and the send (a blocked reactor: a heavy
middleware, a loaded machine) has lost its start, and its request, sent then, reached
the site together with another worker's (0.0006 s apart, measured at load 25).

So a request of a slot with a delay that is about to go more than :data:`LATE` seconds
after its start asks Redis (``slot_take.lua``, "held" with its own id): its start is
still the slot's unreported one (it goes, its start counted from now), or it takes a
new start if the slot allows one now (it goes); else it waits, the reactor running, and
asks again when the slot may allow one. Requests on time pay nothing. It is checked

* as it leaves the downloader middlewares (:class:`LateCheck`'s ``process_request``,
  the last one, added when the scheduler opens): a late request waits there, on its
  own; the worker's other requests, of its slot too, go on (one of them may take the
  slot's next start: the late one then waits for the start after it);
* and, for a request handed out early (politeness.hold), when its hold ends: a reactor
  stalled past its start holds its downloader slot again until a start is allowed.

:data:`LATE` is 1 s: the start is lost only after the delay plus 3 s, and a check that
finds it still its own counts it from now (the exposure starts again); on time, a
worker's pop-to-send is tens of milliseconds (a median of 39 ms at load 25, up to
0.3 s; a heavy middleware 0.2 s), so only stalls pay the round trip.

A request sent in an outage (Redis cannot be asked) goes unchecked. A stall after the
check (between the downloader and the socket write) is not covered: the check counts
the start from then, so it takes another delay plus 3 s there to lose it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.task import deferLater

from scrapy_redis.core.engine import engine_downloader, installed_reactor
from scrapy_redis.store.outage import OUTAGE_ERRORS

#: A request is late when its start was more than this many seconds before now.
LATE = 1.0
#: The longest a late request waits before asking again (seconds).
MAX_WAIT = 1.0


class LateCheck:
    """The check of one worker's late requests (see the module's doc)."""

    def __init__(self, pacing: Any) -> None:
        #: The worker's PolitePacing (politeness.pacing, which imports this module).
        self.pacing = pacing
        stats = getattr(pacing.crawler, "stats", None)
        #: Counts (Scrapy's stats): ``scheduler/fleet/late`` the late requests checked,
        #: ``scheduler/fleet/late_lost`` those whose start was lost (they waited for another).
        self.count: Callable[[str], object] = (
            (lambda key: stats.inc_value(key)) if stats is not None else (lambda key: None)
        )

    async def process_request(self, request: Any, spider: Any = None) -> None:
        """A downloader middleware's (the last): returns once a late ``request`` has its
        start (its own still, or a new one); at once for one on time."""
        pacing = self.pacing
        found = pacing._starting.get(request)
        if found is None:
            return
        key, report, fresh, since = found
        if not report or since is None or time.monotonic() - since <= LATE:
            return
        self.count("scheduler/fleet/late")
        wait = self._take(request, key)
        if wait:
            self.count("scheduler/fleet/late_lost")
        while wait:
            reactor = pacing.reactor or installed_reactor()
            await maybe_deferred_to_future(deferLater(reactor, min(MAX_WAIT, wait), lambda: None))
            wait = self._take(request, key)
        if request in pacing._starting:  # its start is now: not checked again at reached
            pacing._starting[request] = (key, report, fresh, time.monotonic())

    def go(
        self, request: Any, key: str, local: str, since: float, then: Callable[[], object]
    ) -> None:
        """``request`` (of slot ``key``, its downloader slot ``local``), whose start was
        at ``since`` (time.monotonic()), is about to go: run ``then()`` now if it is on
        time, else once its start is confirmed or taken again (its downloader slot held
        meanwhile)."""
        if time.monotonic() - since <= LATE:
            then()
            return
        self.count("scheduler/fleet/late")
        wait = self._take(request, key)
        if not wait:
            then()
            return
        self.count("scheduler/fleet/late_lost")
        self._hold(request, key, local, then, wait)

    def _again(self, request: Any, key: str, local: str, then: Callable[[], object]) -> None:
        wait = self._take(request, key)
        if not wait:
            then()
        else:
            self._hold(request, key, local, then, wait)

    def _hold(
        self, request: Any, key: str, local: str, then: Callable[[], object], wait: float
    ) -> None:
        holds = self.pacing._holds if self.pacing.holds() else None
        until = time.monotonic() + min(MAX_WAIT, wait)
        again = partial(self._again, request, key, local, then)
        if holds is None or not holds.hold(local, until, again):
            then()  # (a slot the downloader no longer has: it went)

    def _take(self, request: Any, key: str) -> float:
        """0 if ``request`` has its start (still its own, or a new one), else the seconds
        to wait before asking again."""
        queue = self.pacing.queue_of(key)
        request_id = queue.ids.get(request) if queue is not None else None
        if request_id is None:  # (not popped from a queue: nothing to check it by)
            return 0.0
        try:
            wait = queue.take_start(key, request_id, (request_id,))
        except OUTAGE_ERRORS:
            return 0.0
        return wait or 0.0  # (None, a slot at its cap: not in "held" mode)


def install_late_check(pacing: Any) -> LateCheck | None:
    """Add the pacing's :class:`LateCheck` to the crawler's downloader, as its last
    ``process_request`` (None if that downloader has no middlewares: a late request is
    then checked as it reaches the downloader, :meth:`LateCheck.go`, its downloader slot
    held while it waits, the slot's other requests with it)."""
    downloader = engine_downloader(pacing.crawler)
    methods = getattr(getattr(downloader, "middleware", None), "methods", None)
    if not isinstance(methods, dict) or "process_request" not in methods:
        return None
    late: LateCheck = pacing.late
    methods["process_request"].append(late.process_request)
    return late
