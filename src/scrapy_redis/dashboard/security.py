"""Who may see the dashboard and who may act on the crawl through it.

* Bound to a loopback address (the default), the dashboard needs no token, but
  every request must name that address in its ``Host`` header (a web page on
  another site cannot reach it through DNS rebinding).
* Bound elsewhere it refuses to start without a token (``--token`` or the
  environment variable :data:`TOKEN_ENV`); with a token every request needs
  it: as ``Authorization: Bearer <token>`` (scripts, Prometheus) or as the
  session cookie the login form sets.
* A POST (an action) from a browser needs the CSRF token of the page (the
  ``X-CSRF-Token`` header, a synchronizer token derived from a per-process
  secret and the session), and its ``Origin``, when sent, must be the
  dashboard's own. A request authenticated by the bearer token needs neither
  (a browser never adds that header on its own).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from typing import Any

from scrapy_redis.exceptions import ConfigurationError

#: A ``twisted.web.server.Request``: much of it is untyped, which strict mypy refuses.
Request = Any

#: The environment variable holding the dashboard's token (or pass ``--token``).
TOKEN_ENV = "SCRAPY_REDIS_DASHBOARD_TOKEN"
#: The session cookie set by the login form.
COOKIE = "scrapy_redis_dashboard"
#: The header carrying the page's CSRF token on POST requests.
CSRF_HEADER = "X-CSRF-Token"

_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) only accepts local connections."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_binding(host: str, token: str | None) -> None:
    """Refuse to listen on a non-loopback ``host`` without a token."""
    if token or is_loopback(host):
        return
    raise ConfigurationError(
        f"The dashboard refuses to listen on {host!r} without a token: anyone who can reach "
        f"it could purge the crawl. Pass --token TOKEN (or set the environment variable "
        f"{TOKEN_ENV}), or listen on 127.0.0.1 (--host 127.0.0.1) and reach it through an "
        "SSH tunnel."
    )


def _digest(secret: bytes, message: str) -> str:
    return hmac.new(secret, message.encode(), hashlib.sha256).hexdigest()


def _header(request: Request, name: str) -> str:
    value = request.getHeader(name)
    return value if isinstance(value, str) else ""


class Guard:
    """The rules above, for one dashboard process (``secret`` is per process)."""

    def __init__(self, token: str | None, secret: bytes | None = None) -> None:
        self.token = token or None
        self.secret = secret or os.urandom(32)

    def session(self) -> str:
        """The session cookie's value (it is not the token itself)."""
        return _digest(self.secret, f"session:{self.token}")

    def token_matches(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def bearer(self, request: Request) -> bool:
        """Whether ``request`` carries ``Authorization: Bearer <the token>``."""
        scheme, _, given = _header(request, "Authorization").partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(given.strip())

    def authenticated(self, request: Request) -> bool:
        """Whether ``request`` may see the dashboard (always, without a token)."""
        if self.token is None or self.bearer(request):
            return True
        cookie = request.getCookie(COOKIE.encode())
        return cookie is not None and hmac.compare_digest(cookie, self.session().encode())

    def host_allowed(self, request: Request) -> bool:
        """Whether the ``Host`` header names a loopback address (always true with a
        token: the token protects a dashboard reachable under other names)."""
        if self.token is not None:
            return True
        host = _header(request, "Host").rsplit(":", 1)[0] if _header(request, "Host") else ""
        return is_loopback(host)

    def csrf_token(self, request: Request) -> str:
        """The token the page sends back with its POST requests."""
        cookie = request.getCookie(COOKIE.encode()) or b""
        return _digest(self.secret, f"csrf:{cookie.decode(errors='replace')}")

    def may_act(self, request: Request) -> bool:
        """Whether a POST ``request`` may change the crawl (see the module's doc)."""
        if self.token is not None and self.bearer(request):
            return True
        if not self.same_origin(request):
            return False
        given = _header(request, CSRF_HEADER)
        return bool(given) and hmac.compare_digest(given, self.csrf_token(request))

    def same_origin(self, request: Request) -> bool:
        """Whether the ``Origin`` header, when sent, is this dashboard (same Host)."""
        origin = _header(request, "Origin")
        if not origin:
            return True
        scheme = "https" if request.isSecure() else "http"
        return origin == f"{scheme}://{_header(request, 'Host')}"
