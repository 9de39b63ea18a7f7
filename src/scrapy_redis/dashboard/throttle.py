"""The back-off after failed token attempts, per client address.

After :data:`MAX_FAILURES` wrong tokens from one address within
:data:`FAILURE_WINDOW` seconds (at the login form or in an ``Authorization:
Bearer`` header), the dashboard refuses every token from that address, right or
wrong, for :data:`LOCKOUT` seconds (429 Too Many Requests): guessing a token
then takes at most five tries a minute. Sessions already logged in keep working.

Behind a reverse proxy every client has the proxy's address, so they share one
back-off; the proxy can limit per client itself.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

#: Wrong tokens from one address, within FAILURE_WINDOW seconds, that start a lockout.
MAX_FAILURES = 5
#: Seconds over which failures are counted.
FAILURE_WINDOW = 60.0
#: Seconds an address is refused once it made MAX_FAILURES failures.
LOCKOUT = 60.0


class Throttle:
    """Counts failed token attempts per address and says how long one must wait.

    ``clock`` returns seconds (:func:`time.monotonic`; tests give their own). Only
    addresses that failed within the last ``window`` seconds, or are locked out,
    are remembered.
    """

    def __init__(
        self,
        limit: int = MAX_FAILURES,
        window: float = FAILURE_WINDOW,
        lockout: float = LOCKOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit, self.window, self.lockout, self.clock = limit, window, lockout, clock
        self._failures: dict[str, deque[float]] = {}
        self._locked_until: dict[str, float] = {}

    def retry_after(self, address: str) -> int:
        """Whole seconds before ``address`` may try a token again (0: now)."""
        left = self._locked_until.get(address, 0.0) - self.clock()
        return math.ceil(left) if left > 0 else 0

    def failed(self, address: str) -> None:
        """``address`` sent a wrong token: locks it out at the ``limit``-th in a window."""
        now = self.clock()
        self._forget(now)
        failures = self._failures.setdefault(address, deque())
        failures.append(now)
        if len(failures) >= self.limit:
            del self._failures[address]
            self._locked_until[address] = now + self.lockout

    def succeeded(self, address: str) -> None:
        """``address`` sent the right token: its earlier failures are forgiven."""
        self._failures.pop(address, None)

    def _forget(self, now: float) -> None:
        """Drop failures older than the window and lockouts that ended."""
        for address, failures in list(self._failures.items()):
            while failures and failures[0] <= now - self.window:
                failures.popleft()
            if not failures:
                del self._failures[address]
        for address, until in list(self._locked_until.items()):
            if until <= now:
                del self._locked_until[address]
