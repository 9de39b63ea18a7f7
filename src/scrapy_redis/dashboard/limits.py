"""Request bodies capped before they are read.

``twisted.web`` reads a whole request body (into memory, or a temporary file) before
the resource sees it, and the dashboard then holds several copies while it parses
it. :class:`CappedRequest` decides from the request line and headers alone how much
body it accepts (:data:`ACTION_BODY_LIMIT` for ``/api/actions/``,
:data:`BODY_LIMIT` for anything else: the login form, a logout, and an action
not authenticated yet: see :meth:`DashboardSite.body_limit`), and refuses a
longer one with ``413 Content Too Large`` as soon as it is announced
(``Content-Length``) or, when chunked, as soon as the chunks received pass the limit.
It then stops reading the connection and closes it: the rest of the body is never
read.
"""

from __future__ import annotations

import json
from io import BytesIO
from typing import Any

from twisted.web.server import Request, Site

#: Bytes of body accepted by ``/login``, ``/logout`` and any other path.
BODY_LIMIT = 4 * 1024
#: Bytes of body accepted by ``/api/actions/<action>`` (a push of ~10,000 URLs; push
#: more with ``scrapy redis push``).
ACTION_BODY_LIMIT = 1024 * 1024
#: Seconds the client is given to read the refusal before the connection is closed.
GRACE = 2.0


def body_limit(path: bytes) -> int:
    """The most bytes of body a request for ``path`` may send."""
    return ACTION_BODY_LIMIT if path.startswith(b"/api/actions/") else BODY_LIMIT


def _refusal(limit: int) -> bytes:
    body = json.dumps({"error": f"request body too large: at most {limit} bytes here"}).encode()
    head = (
        "HTTP/1.1 413 Content Too Large\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


class DashboardSite(Site):
    """The dashboard's site: its requests are :class:`CappedRequest`."""

    def __init__(self, resource: Any) -> None:
        Site.__init__(self, resource, requestFactory=CappedRequest)  # type: ignore[no-untyped-call]

    def body_limit(self, request: Request, path: bytes) -> int:
        """The limit of :func:`body_limit`, but :data:`BODY_LIMIT` for a request that is
        not authenticated (it will be refused: it need not send more)."""
        limit = body_limit(path)
        guard = getattr(self.resource, "guard", None)
        if limit > BODY_LIMIT and guard is not None and not guard.identified(request):
            return BODY_LIMIT
        return limit

    def refused(self, request: Request) -> None:
        """``request`` was refused for its body: a bearer token it sent counts as an
        attempt (a wrong one is a failure, as if answered 401)."""
        guard = getattr(self.resource, "guard", None)
        given = guard.bearer_given(request) if guard is not None else None
        if guard is not None and guard.token is not None and given is not None:
            guard.attempt(request, given)


class CappedRequest(Request):
    """A ``twisted.web`` request that refuses a body over :func:`body_limit`."""

    _limit = BODY_LIMIT
    _body: BytesIO
    _received = 0
    _refused = False

    def gotLength(self, length: int | None) -> None:
        # The request line is parsed (the channel holds it) but not yet given to us.
        path = (getattr(self.channel, "_path", b"") or b"").split(b"?", 1)[0]
        site = getattr(self.channel, "site", None)
        limit = site.body_limit(self, path) if isinstance(site, DashboardSite) else None
        self._limit = body_limit(path) if limit is None else limit
        if length is not None and length > self._limit:
            self.requestHeaders.removeHeader(b"Expect")  # no "100 Continue" after it
            self._refuse()
        self._body = self.content = BytesIO()

    def handleContentChunk(self, data: bytes) -> None:
        if self._refused:
            return
        self._received += len(data)
        if self._received > self._limit:
            self._refuse()
            return
        self._body.write(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if not self._refused:
            Request.requestReceived(self, command, path, version)  # type: ignore[no-untyped-call]

    def _refuse(self) -> None:
        """Answer 413, stop reading, and close the connection after :data:`GRACE`."""
        self._refused = True
        site = getattr(self.channel, "site", None)
        if isinstance(site, DashboardSite):
            site.refused(self)
        transport: Any = self.channel.transport
        transport.write(_refusal(self._limit))
        transport.pauseProducing()
        from twisted.internet import reactor as installed

        reactor: Any = installed
        reactor.callLater(GRACE, transport.loseConnection)
