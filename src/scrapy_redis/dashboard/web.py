"""The dashboard's web resource (``twisted.web``): the page, its JSON, /metrics, actions.

=================================  ================================================
``GET /``                          the page (HTML; its script and style under /static,
                                   served to anyone: they hold no data)
``GET /api/status``                every crawl's status (JSON)
``GET /metrics``                   the same numbers for Prometheus
``POST /api/actions/<action>``     push, requeue or purge (JSON body, see fleet.py)
``GET /login``, ``POST /login``    the login form, with a token
``POST /logout``                   ends the session (with the page's CSRF token)
=================================  ================================================

Reads and actions run in the reactor's thread pool (redis-py blocks); the status is
read once for every viewer and /metrics (:mod:`scrapy_redis.dashboard.reads`). Who
may do what is decided in :mod:`scrapy_redis.dashboard.security`; bodies are capped
before they are read (:mod:`scrapy_redis.dashboard.limits`).
"""

from __future__ import annotations

import json
import logging
from html import escape
from importlib.resources import files
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from redis.exceptions import RedisError
from twisted.internet.threads import deferToThreadPool
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from scrapy_redis.dashboard import metrics
from scrapy_redis.dashboard.fleet import ActionError
from scrapy_redis.dashboard.reads import SharedRead, Snapshot, describe_error
from scrapy_redis.dashboard.sessions import cookie_name

if TYPE_CHECKING:
    from collections.abc import Callable

    from twisted.python.failure import Failure

    from scrapy_redis.dashboard.fleet import Fleet
    from scrapy_redis.dashboard.security import Guard

logger = logging.getLogger(__name__)

#: A ``twisted.web.server.Request``: much of it is untyped, which strict mypy refuses.
Request = Any

_STATIC = {
    "/static/dashboard.js": "text/javascript; charset=utf-8",
    "/static/dashboard.css": "text/css; charset=utf-8",
}
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; "
    "form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: under no-referrer a browser sends "Origin: null" with a
    # form POST, and the login form would be refused as cross-origin.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_ACTIONS = "/api/actions/"


def asset(name: str) -> str:
    """The text of one of the dashboard's files (``static/<name>``)."""
    return files("scrapy_redis.dashboard").joinpath(f"static/{name}").read_text(encoding="utf-8")


def _send(request: Request, code: int, body: str, content_type: str) -> bytes:
    request.setResponseCode(code)
    request.setHeader("Content-Type", content_type)
    return body.encode()


def _json(request: Request, code: int, data: Any) -> bytes:
    return _send(request, code, json.dumps(data), "application/json")


def _login_page(error: str) -> str:
    """The login form, saying ``error``."""
    return asset("login.html").replace("<!--error-->", f"<p class=error>{escape(error)}</p>")


def _not_allowed(request: Request, path: str, method: str) -> bytes:
    request.setHeader("Allow", method)
    return _json(request, 405, {"error": f"{request.method.decode()} {path}: use {method}"})


class Dashboard(Resource):
    """The whole site, one leaf resource: every request passes the same checks."""

    isLeaf = True

    def __init__(
        self, fleet: Fleet, guard: Guard, reactor: Any, interval: float, redis: str = ""
    ) -> None:
        Resource.__init__(self)  # type: ignore[no-untyped-call]
        self.fleet, self.guard, self.reactor, self.interval = fleet, guard, reactor, interval
        #: The Redis the crawls are read from, password masked (shown on the page).
        self.redis = redis
        self.reads = SharedRead(fleet.statuses, reactor, max_age=interval)

    def render(self, request: Request) -> bytes | int:
        for name, value in _SECURITY_HEADERS.items():
            request.setHeader(name, value)
        path = (request.path or b"/").decode(errors="replace")
        if not self.guard.host_allowed(request):
            return _json(request, 403, {"error": "Host header is not a loopback address"})
        if path == "/login":
            return self._login(request)
        if path in _STATIC and request.method in (b"GET", b"HEAD"):  # the package's own code
            return _send(request, 200, asset(path.rsplit("/", 1)[1]), _STATIC[path])
        if not self.guard.authenticated(request):
            return self._unauthenticated(request, path)
        if path.startswith(_ACTIONS) or path == "/logout":
            if request.method != b"POST":
                return _not_allowed(request, path, "POST")
            if path == "/logout":
                return self._logout(request)
            return self._action(request, path[len(_ACTIONS) :])
        if request.method in (b"GET", b"HEAD"):
            return self._get(request, path)
        return _not_allowed(request, path, "GET")

    def _get(self, request: Request, path: str) -> bytes | int:
        if path == "/":
            return _send(request, 200, self._page(request), "text/html; charset=utf-8")
        if path == "/api/status":
            return self._shared(request, self._status)
        if path == "/metrics":
            return self._shared(request, self._metrics)
        return _json(request, 404, {"error": f"nothing at {path}"})

    def _status(self, request: Request, snapshot: Snapshot) -> bytes:
        """The crawls (200), or why they cannot be read (503), with the read's age."""
        read = {
            "number": snapshot.number,
            "age": round(self.reads.age(snapshot), 3),
            "took": round(snapshot.took, 3),
        }
        if snapshot.data is None:
            error = f"Cannot read the crawls from {self.redis}: {snapshot.error}"
            return _json(request, 503, {"error": error, "redis": self.redis, "read": read})
        return _json(request, 200, {**snapshot.data, "redis": self.redis, "read": read})

    def _metrics(self, request: Request, snapshot: Snapshot) -> bytes:
        """The crawls' numbers and the dashboard's own; 200 even when the read failed
        (``scrapy_redis_dashboard_status_ok 0``: an alert, not a failed scrape)."""
        crawls = snapshot.data["crawls"] if snapshot.data is not None else []
        own = metrics.Reads(
            snapshot.data is not None,
            self.reads.started,
            self.reads.age(snapshot),
            snapshot.took,
            self.guard.throttle.failures,
        )
        text = metrics.render(crawls) + metrics.render_dashboard(own, snapshot.error)
        return _send(request, 200, text, metrics.CONTENT_TYPE)

    def _shared(self, request: Request, respond: Callable[[Request, Snapshot], bytes]) -> int:
        """Answer with ``respond(request, snapshot)`` of the shared read."""
        gone: list[bool] = []
        request.notifyFinish().addErrback(lambda _: gone.append(True))

        def finish(snapshot: Snapshot) -> None:
            if not gone:
                request.write(respond(request, snapshot))
                request.finish()

        self.reads.get().addCallback(finish)
        return NOT_DONE_YET

    def _page(self, request: Request) -> str:
        values = {
            "csrf": self.guard.csrf_token(request),
            "interval": str(self.interval),
            "redis": escape(self.redis),
            "logout": "" if self.guard.token is not None else "hidden",
        }
        page = asset("index.html")
        for name, value in values.items():
            page = page.replace(f"{{{{{name}}}}}", value)
        return page

    def _too_many(self, request: Request, path: str, wait: int) -> bytes:
        request.setHeader("Retry-After", str(wait))
        error = f"Too many wrong tokens: try again in {wait} s."
        if path == "/login":
            return _send(request, 429, _login_page(error), "text/html; charset=utf-8")
        return _json(request, 429, {"error": error})

    def _unauthenticated(self, request: Request, path: str) -> bytes:
        wait = self.guard.retry_after(request)
        if wait and self.guard.bearer_given(request) is not None:  # a wrong token
            return self._too_many(request, path, wait)
        if request.method == b"GET" and path == "/":
            request.redirect(b"/login")
            return b""
        request.setHeader("WWW-Authenticate", 'Bearer realm="scrapy-redis dashboard"')
        return _json(request, 401, {"error": "log in at /login, or send Authorization: Bearer"})

    def _login(self, request: Request) -> bytes:
        if self.guard.token is None:
            request.redirect(b"/")
            return b""
        if request.method != b"POST":
            return _send(request, 200, asset("login.html"), "text/html; charset=utf-8")
        refusal = self.guard.origin_refusal(request)
        if refusal is not None:
            return _send(request, 403, _login_page(refusal), "text/html; charset=utf-8")
        given = (request.args or {}).get(b"token", [b""])[0].decode(errors="replace")
        if not self.guard.attempt(request, given):
            wait = self.guard.retry_after(request)
            if wait:
                return self._too_many(request, "/login", wait)
            return _send(request, 401, _login_page("Wrong token."), "text/html; charset=utf-8")
        session = self.guard.sessions.open()
        self._set_cookie(request, session, int(self.guard.sessions.lifetime))
        request.redirect(b"/")
        return b""

    def _set_cookie(self, request: Request, value: str, max_age: int) -> None:
        secure = "; Secure" if self.guard.secure_origin(request) else ""
        request.setHeader(
            "Set-Cookie",
            f"{cookie_name(request)}={quote(value)}; Max-Age={max_age}; Path=/; HttpOnly; "
            f"SameSite=Strict{secure}",
        )

    def _logout(self, request: Request) -> bytes:
        """End the session of ``request`` (it needs the page's CSRF token)."""
        refusal = self.guard.action_refusal(request)
        if refusal is not None:
            return _json(request, 403, {"error": refusal})
        session = self.guard.session_of(request)
        if session is not None:
            self.guard.sessions.close(session)
        self._set_cookie(request, "", 0)
        return _json(request, 200, {"logged_out": session is not None})

    def _action(self, request: Request, action: str) -> bytes | int:
        refusal = self.guard.action_refusal(request)
        if refusal is not None:
            return _json(request, 403, {"error": refusal})
        try:
            body = json.loads(request.content.read() if request.content else b"")
        except (ValueError, RecursionError):  # not JSON, or nested too deep to parse
            body = None
        if not isinstance(body, dict):
            return _json(request, 400, {"error": "the body must be a JSON object"})
        work = lambda: self._act(action, body)  # noqa: E731
        return self._later(request, work, lambda r: _json(request, 200, r))

    def _act(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.fleet.act(action, body)
        finally:  # in the pool's thread: tell the reactor's
            self.reactor.callFromThread(self.reads.changed)

    def _later(
        self, request: Request, work: Callable[[], Any], respond: Callable[[Any], bytes]
    ) -> int:
        """Run ``work`` in the thread pool; answer with ``respond(result)``."""
        gone: list[bool] = []
        request.notifyFinish().addErrback(lambda _: gone.append(True))

        def finish(body: bytes) -> None:
            if not gone:
                request.write(body)
                request.finish()

        deferred = deferToThreadPool(self.reactor, self.reactor.getThreadPool(), work)
        deferred.addCallbacks(respond, lambda failure: self._failed(request, failure))
        deferred.addCallback(finish)
        return NOT_DONE_YET

    def _failed(self, request: Request, failure: Failure) -> bytes:
        """An action that failed: 400 if refused, else 503 saying why (a Redis error, or
        a value in Redis it cannot use), never a 500."""
        if isinstance(failure.value, ActionError):
            return _json(request, 400, {"error": str(failure.value)})
        error = describe_error(failure.value)
        logger.error("dashboard action failed: %s", error)
        if not isinstance(failure.value, RedisError):
            logger.debug("the action failed: %s", failure.getTraceback())
        return _json(request, 503, {"error": error})
