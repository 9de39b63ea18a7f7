"""The back-off after wrong tokens: per client address, and for all addresses together.

After :data:`MAX_FAILURES` wrong tokens from one address within
:data:`FAILURE_WINDOW` seconds (at the login form or in an ``Authorization:
Bearer`` header), or :data:`GLOBAL_MAX_FAILURES` from all addresses together (an
attacker rotating through 127.0.0.0/8, or through an IPv6 prefix), wrong tokens
are answered ``429 Too Many Requests`` with ``Retry-After`` for :data:`LOCKOUT`
seconds instead of 401. IPv6 addresses count by their /64 prefix (one host often
holds a whole /64).

Only failures are throttled: a token is always compared first, and the right one is
always accepted, so no one can lock a valid token (Prometheus', the operator's) out by
failing on purpose. The answer to a wrong token depends on how many failures came
before, never on the token sent, and the comparison takes the same time whatever it
is given (see :meth:`~scrapy_redis.dashboard.security.Guard.token_matches`). The
back-off therefore cannot stop a guess that is right: what keeps a token from being
guessed is its length (16 characters at least beyond loopback), and the failures are
counted in ``/metrics`` (``scrapy_redis_dashboard_token_failures_total``) for an alert.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

#: Wrong tokens from one address, within FAILURE_WINDOW seconds, that start a back-off.
MAX_FAILURES = 5
#: Wrong tokens from all addresses together, within FAILURE_WINDOW, that start one for all.
GLOBAL_MAX_FAILURES = 30
#: Seconds over which failures are counted.
FAILURE_WINDOW = 60.0
#: Seconds wrong tokens are answered 429 once a limit was reached.
LOCKOUT = 60.0
#: Addresses tracked one by one at most (more within a window count only globally).
MAX_ADDRESSES = 10_000
#: The key every address shares for the global count.
EVERYONE = "*"


def client_key(address: str) -> str:
    """What failures of ``address`` count under: itself, or its /64 for IPv6."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip.ipv4_mapped or ip) if isinstance(ip, ipaddress.IPv6Address) else str(ip)


class Throttle:
    """Counts failed token attempts per address and in all, and says how long one
    must wait. ``clock`` returns seconds (:func:`time.monotonic`; tests give their own).
    """

    def __init__(
        self,
        limit: int = MAX_FAILURES,
        window: float = FAILURE_WINDOW,
        lockout: float = LOCKOUT,
        clock: Callable[[], float] = time.monotonic,
        global_limit: int = GLOBAL_MAX_FAILURES,
    ) -> None:
        self.limit, self.window, self.lockout, self.clock = limit, window, lockout, clock
        self.global_limit = global_limit
        #: Every failure since the start (for /metrics).
        self.failures = 0
        self._failures: dict[str, deque[float]] = {}
        self._locked_until: dict[str, float] = {}
        self._swept = -math.inf

    def retry_after(self, address: str) -> int:
        """Whole seconds before a wrong token from ``address`` is answered 401 again
        rather than 429 (0: now)."""
        now = self.clock()
        until = max(
            self._locked_until.get(client_key(address), 0.0),
            self._locked_until.get(EVERYONE, 0.0),
        )
        return math.ceil(until - now) if until > now else 0

    def failed(self, address: str) -> None:
        """``address`` sent a wrong token: a back-off starts at a limit reached."""
        now = self.clock()
        if now - self._swept >= 1.0:  # a sweep of every address at most once a second
            self._forget(now)
            self._swept = now
        self.failures += 1
        self._count(EVERYONE, self.global_limit, now)
        key = client_key(address)
        if key in self._failures or len(self._failures) < MAX_ADDRESSES:
            self._count(key, self.limit, now)

    def succeeded(self, address: str) -> None:
        """``address`` sent the right token: its earlier failures are forgiven."""
        self._failures.pop(client_key(address), None)

    def _count(self, key: str, limit: int, now: float) -> None:
        failures = self._failures.setdefault(key, deque())
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        failures.append(now)
        if len(failures) >= limit:
            del self._failures[key]
            self._locked_until[key] = now + self.lockout

    def _forget(self, now: float) -> None:
        """Drop failures older than the window and back-offs that ended."""
        for key, failures in list(self._failures.items()):
            while failures and failures[0] <= now - self.window:
                failures.popleft()
            if not failures:
                del self._failures[key]
        for key, until in list(self._locked_until.items()):
            if until <= now:
                del self._locked_until[key]
