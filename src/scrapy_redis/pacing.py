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

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

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

    def _forget_idle_slots(self, now: float) -> None:
        self._next_start = {s: at for s, at in self._next_start.items() if at > now}
