"""Who may see the dashboard and who may act on the crawl through it.

* Bound to a loopback address (the default), the dashboard needs no token, but
  every request must name that address in its ``Host`` header (a web page on
  another site cannot reach it through DNS rebinding).
* Bound elsewhere it refuses to start without a token of at least
  :data:`MIN_TOKEN_LENGTH` characters (``--token`` or the environment variable
  :data:`TOKEN_ENV`); with a token every request needs it: as ``Authorization:
  Bearer <token>`` (scripts, Prometheus) or as the cookie of a session the login form
  opened (:mod:`scrapy_redis.dashboard.sessions`). Wrong tokens are answered 429 after
  too many (see :mod:`scrapy_redis.dashboard.throttle`); the right one never is.
* A POST (an action, a login, a logout) from a browser must come from the dashboard's
  own page: its ``Origin``, when sent, must name the host (and port) of the ``Host``
  header, whatever its scheme (behind a TLS reverse proxy the browser says
  ``https`` while the dashboard itself is reached over ``http``). An action (and a
  logout) also needs the CSRF token of the page (the ``X-CSRF-Token`` header, a
  synchronizer token derived from a per-process secret and the session id), which
  another site cannot read. A request authenticated by the bearer token needs neither
  (a browser never adds that header on its own).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from typing import Any
from urllib.parse import urlsplit

from scrapy_redis.dashboard.sessions import Sessions, cookie_name, cookie_values
from scrapy_redis.dashboard.throttle import Throttle
from scrapy_redis.exceptions import ConfigurationError

#: A ``twisted.web.server.Request``: much of it is untyped, which strict mypy refuses.
Request = Any

#: The environment variable holding the dashboard's token (or pass ``--token``).
TOKEN_ENV = "SCRAPY_REDIS_DASHBOARD_TOKEN"
#: The header carrying the page's CSRF token on POST requests.
CSRF_HEADER = "X-CSRF-Token"
#: The fewest characters a token may have when the dashboard listens beyond loopback.
MIN_TOKEN_LENGTH = 16

_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_MAKE_TOKEN = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) only accepts local connections."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_binding(host: str, token: str | None) -> None:
    """Refuse to listen on a non-loopback ``host`` without a token, or with a short one."""
    if is_loopback(host):
        return
    if not token:
        raise ConfigurationError(
            f"The dashboard refuses to listen on {host!r} without a token: anyone who can "
            f"reach it could purge the crawl. Pass --token TOKEN (or set the environment "
            f"variable {TOKEN_ENV}), or listen on 127.0.0.1 (--host 127.0.0.1) and reach it "
            "through an SSH tunnel."
        )
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConfigurationError(
            f"The dashboard refuses to listen on {host!r} with a token of {len(token)} "
            f"characters: beyond loopback the token (--token, or the environment variable "
            f"{TOKEN_ENV}) needs at least {MIN_TOKEN_LENGTH}. Make one with {_MAKE_TOKEN}."
        )


def _digest(secret: bytes, message: str) -> str:
    return hmac.new(secret, message.encode(), hashlib.sha256).hexdigest()


def _header(request: Request, name: str) -> str:
    value = request.getHeader(name)
    return value if isinstance(value, str) else ""


def _client(request: Request) -> str:
    """The address the request came from (a reverse proxy's, behind one)."""
    address = request.getClientAddress()
    return str(getattr(address, "host", address))


def _authority(scheme: str, netloc: str) -> tuple[str, int | None] | None:
    """``netloc``'s host and port (None: the default port of ``scheme``); None if invalid."""
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.hostname, None if port == _DEFAULT_PORTS[scheme] else port


class Guard:
    """The rules above, for one dashboard process (``secret`` is per process)."""

    def __init__(
        self,
        token: str | None,
        secret: bytes | None = None,
        throttle: Throttle | None = None,
        sessions: Sessions | None = None,
    ) -> None:
        self.token = token or None
        self.secret = secret or os.urandom(32)
        self.throttle = throttle or Throttle()
        self.sessions = sessions or Sessions()

    def token_matches(self, given: str) -> bool:
        """Whether ``given`` is the token, in a time that depends on neither (their
        keyed hashes are compared, so not even their lengths show)."""
        if self.token is None:
            return False
        return hmac.compare_digest(
            _digest(self.secret, f"token:{given}"), _digest(self.secret, f"token:{self.token}")
        )

    def attempt(self, request: Request, given: str) -> bool:
        """Whether ``given`` is the token; a wrong one counts against the client's address
        (and all addresses); the right one is accepted whatever failed before."""
        matches = self.token_matches(given)
        if matches:
            self.throttle.succeeded(_client(request))
        else:
            self.throttle.failed(_client(request))
        return matches

    def retry_after(self, request: Request) -> int:
        """Seconds during which a wrong token of the client is answered 429 (0: none)."""
        return self.throttle.retry_after(_client(request))

    def bearer_given(self, request: Request) -> str | None:
        """The token of an ``Authorization: Bearer`` header (None: no such header)."""
        scheme, _, given = _header(request, "Authorization").partition(" ")
        return given.strip() if scheme.lower() == "bearer" else None

    def bearer(self, request: Request) -> bool:
        """Whether ``request`` carries ``Authorization: Bearer <the token>``."""
        given = self.bearer_given(request)
        return given is not None and self.token_matches(given)

    def session_of(self, request: Request) -> str | None:
        """The open session whose cookie ``request`` sends (None: none)."""
        return self.sessions.first_valid(cookie_values(request, cookie_name(request)))

    def identified(self, request: Request) -> bool:
        """Whether ``request`` would be authenticated, without counting an attempt (its
        headers are enough: it is asked before the body is read)."""
        if self.token is None:
            return True
        return self.bearer(request) or self.session_of(request) is not None

    def authenticated(self, request: Request) -> bool:
        """Whether ``request`` may see the dashboard (always, without a token). A bearer
        token, when sent, decides (and counts as an attempt); else the session cookie."""
        if self.token is None:
            return True
        given = self.bearer_given(request)
        if given is not None:
            return self.attempt(request, given)
        return self.session_of(request) is not None

    def host_allowed(self, request: Request) -> bool:
        """Whether the ``Host`` header names a loopback address (always true with a
        token: the token protects a dashboard reachable under other names)."""
        if self.token is not None:
            return True
        host = _header(request, "Host").rsplit(":", 1)[0] if _header(request, "Host") else ""
        return is_loopback(host)

    def csrf_token(self, request: Request) -> str:
        """The token the page sends back with its POST requests: bound to the session
        (with a token), else the same for every page of this process (loopback)."""
        session = self.session_of(request) if self.token is not None else None
        return _digest(self.secret, f"csrf:{session or ''}")

    def action_refusal(self, request: Request) -> str | None:
        """Why a POST ``request`` may not change the crawl (None: it may; see the
        module's doc)."""
        if self.token is not None and self.bearer(request):
            return None
        refusal = self.origin_refusal(request)
        if refusal is not None:
            return refusal
        given = _header(request, CSRF_HEADER)
        if given and hmac.compare_digest(given, self.csrf_token(request)):
            return None
        return f"missing or wrong {CSRF_HEADER} header: reload the page"

    def origin_refusal(self, request: Request) -> str | None:
        """Why the ``Origin`` header is not this dashboard (None: it is, or none was
        sent). Its host and port must be the ``Host`` header's; the scheme may differ (a
        TLS reverse proxy)."""
        origin = _header(request, "Origin")
        if not origin:
            return None
        scheme, _, netloc = origin.partition("://")
        host = _header(request, "Host")
        expected = _authority(scheme, host) if scheme in _DEFAULT_PORTS else None
        if expected is not None and _authority(scheme, netloc) == expected:
            return None
        return (
            f"cross-origin request refused: Origin {origin!r} is not this dashboard's Host "
            f"{host!r} (behind a reverse proxy, have it forward the browser's Host header)"
        )

    def secure_origin(self, request: Request) -> bool:
        """Whether the browser is on HTTPS (directly, or through a TLS reverse proxy)."""
        return bool(request.isSecure()) or _header(request, "Origin").startswith("https://")
