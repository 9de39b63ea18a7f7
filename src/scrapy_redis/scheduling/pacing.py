"""How much work a worker takes from the shared queue: about what it starts soon.

Requests a worker has leased and not started are of no use to the others. On a
polite crawl (DOWNLOAD_DELAY, CONCURRENT_REQUESTS_PER_DOMAIN = 1) Scrapy's
engine takes up to CONCURRENT_REQUESTS requests at once, most of them only to
wait in the downloader for their turn, while the other workers idle. So the
scheduler, through a :class:`Pacer`,

* hands a request to the engine only while the downloader slot it goes to (one
  per domain by default) has less than :data:`HORIZON` seconds of requests
  handed to it and not started: a slot with a delay starts one request per
  delay, so it gets ``HORIZON / delay`` of them, plus the one it starts now.
  A slot without a delay is not paced (Scrapy's CONCURRENT_REQUESTS bounds it),
  none is while the downloader is empty (responses from HTTPCACHE, for
  instance, skip the slots), and no worker is paced unless the settings may
  give a slot a delay (:func:`slots_may_have_delays`);
* sizes each pop by its hand-out rate: about what it hands out in
  :data:`BATCH_HORIZON`, at least 1, growing at most twofold per pop up to
  SCHEDULER_PREFETCH (a worker whose engine drains batches quickly soon pops
  SCHEDULER_PREFETCH at a time), and, after a request was held back, no more
  than its slot starts in :data:`HORIZON`. About four pops a second at any
  rate cost next to nothing, and keep what a worker holds unstarted (crawled
  again if it dies, ahead of later higher priorities) small.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from scrapy_redis.core.engine import (
    downloader_slot,
    engine_downloader,
    installed_reactor,
    wake_engine,
)

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

#: The scheduler's parts log as the scheduler.
scheduler_logger = logging.getLogger("scrapy_redis.scheduler")

#: Seconds of work that may wait in a worker's downloader.
HORIZON = 1.0
#: Seconds of work one pop leases, at the worker's hand-out rate.
BATCH_HORIZON = 0.25
#: What the first pop leases when there is no downloader to pace by (a scheduler driven
#: without Scrapy's engine), at most SCHEDULER_PREFETCH.
UNPACED_FIRST_BATCH = 16
#: Slots tracked before those with nothing pending are forgotten.
_MAX_SLOTS = 1024


def slots_may_have_delays(settings: BaseSettings) -> bool:
    """Whether a downloader slot may have a delay: DOWNLOAD_DELAY, AUTOTHROTTLE_ENABLED
    or a ``delay`` in DOWNLOAD_SLOTS. If not, nothing is paced (and nothing costs)."""
    if settings.getfloat("DOWNLOAD_DELAY") > 0 or settings.getbool("AUTOTHROTTLE_ENABLED"):
        return True
    slots = settings.getdict("DOWNLOAD_SLOTS").values()
    return any(isinstance(slot, dict) and slot.get("delay") for slot in slots)


class Pacer:
    """How many requests the next pop leases, and whether to hand out the next one now.

    **Pops.** Call :meth:`size` when everything leased so far was handed out (or
    set aside), then :meth:`popped` with how many the pop leased. The first pop
    leases 1 (:data:`UNPACED_FIRST_BATCH` unpaced); each next one
    ``ceil(leased * batch_horizon / elapsed)``, the hand-out rate of the last
    batch over ``batch_horizon``, between 1 and twice the last batch (and
    SCHEDULER_PREFETCH);
    a pop that leased nothing leaves the size as it was. After a request was held
    back, the next pop leases at most what its slot starts in ``horizon``, unless
    requests of other slots were handed out past it (:meth:`skipped`).

    **Hand-outs.** :meth:`hold_back` tells whether a request for a downloader
    slot must wait: each slot with a delay is due to start the requests handed
    to it one delay apart; one is held back while the slot's next start is more
    than ``horizon`` away.
    """

    def __init__(
        self,
        prefetch: int,
        clock: Callable[[], float] = time.monotonic,
        horizon: float = HORIZON,
        batch_horizon: float = BATCH_HORIZON,
    ) -> None:
        self.prefetch = prefetch
        self.horizon = horizon
        self.batch_horizon = batch_horizon
        self._clock = clock
        self._size = 0  # not known before the first pop
        self._leased = 0  # by the last pop
        self._popped_at = 0.0
        self._slot_cap = 0  # what the slot of a held-back request starts in horizon
        self._mixed = False  # a request was handed out past a held-back one
        self._next_start: dict[str, float] = {}  # per slot: when it starts the next request

    def size(self, paced: bool = True) -> int:
        """The number of requests the next pop asks for (``paced``: whether the worker
        has a downloader to pace by, read at the first pop)."""
        if not self._size:
            self._size = 1 if paced else min(self.prefetch, UNPACED_FIRST_BATCH)
        elif self._leased:
            elapsed = self._clock() - self._popped_at
            most = min(2 * self._leased, self.prefetch)
            if elapsed > 0:
                most = min(most, math.ceil(self._leased * self.batch_horizon / elapsed))
            self._size = max(1, most)
        if self._slot_cap and not self._mixed:
            self._size = min(self._size, self._slot_cap)
        return self._size

    def popped(self, leased: int) -> None:
        """The pop asked for :meth:`size` and leased ``leased`` requests (0: none left)."""
        self._leased = leased
        self._popped_at = self._clock()
        self._slot_cap = 0
        self._mixed = False

    def skipped(self, handed: bool) -> None:
        """A hand-out looked past held-back requests and ``handed`` out another one: the
        batch holds requests of other slots, so the held-back slot's pace does not cap
        the next pop."""
        self._mixed = self._mixed or handed

    def hold_back(self, slot: str, delay: float, idle: bool = False) -> float:
        """0 to hand out a request for downloader ``slot`` (DOWNLOAD_DELAY ``delay``) now,
        counted as handed; else the seconds after which it may be.

        ``idle``: the downloader holds no request, so nothing handed out earlier waits
        (all were answered without reaching a slot, e.g. from HTTPCACHE, or dropped).
        """
        if idle:
            self._next_start.clear()
        if delay <= 0:
            return 0.0
        now = self._clock()
        next_start = self._next_start.get(slot, now)
        if next_start - now > self.horizon:
            self._slot_cap = max(1, math.ceil(self.horizon / delay))
            return next_start - now - self.horizon
        if len(self._next_start) >= _MAX_SLOTS and slot not in self._next_start:
            self._forget_idle_slots(now)
        self._next_start[slot] = max(next_start, now) + delay
        return 0.0

    def tracked_slots(self) -> int:
        """How many downloader slots it keeps a next start for (bounded: idle ones are
        forgotten past 1,024)."""
        return len(self._next_start)

    def _forget_idle_slots(self, now: float) -> None:
        self._next_start = {s: at for s, at in self._next_start.items() if at > now}


class DownloaderPacing:
    """A :class:`Pacer` applied to the engine's downloader: sizes the pops and holds
    back the requests whose slot has enough to start for now (see the module's doc).

    The downloader is looked up at the first pop, and only if the settings may delay
    a slot; until then (or without one) nothing is held back.
    """

    def __init__(
        self, pacer: Pacer, crawler: Crawler | None, spider: Any = None, reactor: Any = None
    ) -> None:
        self.pacer = pacer
        self.crawler = crawler
        self.spider = spider
        self.reactor = reactor
        #: The engine's downloader once found, while pacing by it (else None).
        self.downloader: Any = None
        self._may_delay: bool | None = None  # whether the settings may delay a slot
        self._wake_call: Any = None  # wakes the engine after a hold-back

    def batch_size(self) -> int:
        """How many requests the next pop leases."""
        return self.pacer.size(paced=self._find_downloader() is not None)

    def popped(self, leased: int) -> None:
        self.pacer.popped(leased)

    def skipped(self, handed: bool) -> None:
        self.pacer.skipped(handed=handed)

    def lending(self) -> Collection[Request]:
        """Handed-out requests the engine may be done with whose leases must be kept
        for now (fleet-wide limits: a download uses their place, politeness.outside)."""
        return ()

    def _find_downloader(self) -> Any:
        if self._may_delay is None:
            crawler = self.crawler
            self._may_delay = bool(crawler and slots_may_have_delays(crawler.settings))
        if self.downloader is None and self._may_delay:
            self.downloader = engine_downloader(self.crawler)
        return self.downloader

    def held_back(self, request: Request) -> bool:
        """Whether ``request`` must wait: its downloader slot has enough to start for now.

        If so, the engine is asked again when the slot may take it (it also asks
        whenever a download ends).
        """
        if self.downloader is None:
            return False
        try:
            slot = downloader_slot(self.downloader, request, self.crawler)  # type: ignore[arg-type]
        except Exception:  # a downloader unlike Scrapy's: stop pacing, lose nothing
            scheduler_logger.warning(
                "Cannot read the downloader's slots: not pacing requests any more",
                exc_info=True,
                extra={"spider": self.spider},
            )
            self.downloader = None
            self._may_delay = False
            return False
        wait = self.pacer.hold_back(slot.key, slot.delay, slot.idle)
        if wait and not (self._wake_call is not None and self._wake_call.active()):
            reactor = self.reactor or installed_reactor()
            self._wake_call = reactor.callLater(wait, wake_engine, self.crawler)
        return bool(wait)
