"""How long a Redis spider has been idle (see ``max_idle_time``).

The idle time counts from the first ``spider_idle`` event after the spider last
had work (a start message read, a response, work in the shared queue), not
from the start of the process.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class IdleTimer:
    """The start of the current idle period, on a monotonic ``clock``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        #: When the current idle period began (``clock`` time), None while busy.
        self.since: float | None = None

    @property
    def running(self) -> bool:
        """Whether an idle period has begun and no work came since."""
        return self.since is not None

    def busy(self) -> None:
        """The spider has work: the next idle event starts a new period."""
        self.since = None

    def expired(self, max_idle_time: float) -> bool:
        """Note an idle event (starting a period if none runs); whether the period has
        lasted ``max_idle_time`` seconds (never, when it is 0)."""
        now = self.clock()
        if self.since is None:
            self.since = now
        return bool(max_idle_time) and now - self.since >= max_idle_time
