"""The sessions the login form opens: one random id per login, valid for
:data:`SESSION_LIFETIME` seconds or until its logout (or the dashboard's restart).

The session cookie's name ends with the port the dashboard was reached on
(``scrapy_redis_dashboard_6793``): cookies are not isolated by port, so a dashboard
(or any program) on another port of the same host could otherwise overwrite it. A
cookie planted under that name from another port (with ``Path=/api``, say) makes
the browser send two values: every value is tried, and the first valid one counts.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

#: A ``twisted.web.server.Request``: much of it is untyped, which strict mypy refuses.
Request = Any

#: The session cookie's name, before ``_<port>``.
COOKIE = "scrapy_redis_dashboard"
#: Seconds a session lasts after its login (12 hours).
SESSION_LIFETIME = 12 * 3600.0
#: Sessions kept at most: a new login past it ends the oldest.
MAX_SESSIONS = 1000


def cookie_name(request: Request) -> str:
    """The session cookie's name for the port ``request`` came in on."""
    return f"{COOKIE}_{request.getHost().port}"


def cookie_values(request: Request, name: str) -> list[str]:
    """Every value the ``Cookie`` headers of ``request`` give ``name``, in order."""
    values = []
    for header in request.requestHeaders.getRawHeaders(b"Cookie") or []:
        for pair in header.decode("latin-1").split(";"):
            key, equals, value = pair.strip().partition("=")
            if equals and key == name:
                values.append(value.strip().strip('"'))
    return values


def _key(session: str) -> str:
    """What is stored of a session id: its hash (a lookup leaks no timing of the id)."""
    return hashlib.sha256(session.encode()).hexdigest()


class Sessions:
    """The open sessions of one dashboard process; ``clock`` gives seconds."""

    def __init__(
        self,
        lifetime: float = SESSION_LIFETIME,
        limit: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lifetime, self.limit, self.clock = lifetime, limit, clock
        self._expiry: dict[str, float] = {}

    def open(self) -> str:
        """A new session's id."""
        self._forget()
        while len(self._expiry) >= self.limit:
            del self._expiry[next(iter(self._expiry))]  # the oldest login
        session = secrets.token_urlsafe(32)
        self._expiry[_key(session)] = self.clock() + self.lifetime
        return session

    def valid(self, session: str) -> bool:
        """Whether ``session`` is open (logged in, not expired, not logged out)."""
        return self._expiry.get(_key(session), 0.0) > self.clock()

    def first_valid(self, candidates: list[str]) -> str | None:
        """The first open session among ``candidates`` (None: none is)."""
        return next((session for session in candidates if self.valid(session)), None)

    def close(self, session: str) -> None:
        """Log ``session`` out."""
        self._expiry.pop(_key(session), None)

    def _forget(self) -> None:
        now = self.clock()
        for key, expiry in list(self._expiry.items()):
            if expiry <= now:
                del self._expiry[key]
