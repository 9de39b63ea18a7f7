"""When a request's bytes have left the worker: the moment a start is reported to the fleet.

A start of a slot with a delay is reported to Redis (``slot_started.lua``), which counts
the slot's next start from then. If the report left before the request's bytes did, a
worker descheduled in between would send them late, and another worker's next request
of the slot could reach the site less than the delay after this one.

Between Scrapy's ``request_reached_downloader`` and the socket write, Scrapy's downloader
starts the download in a new task (under asyncio, at the event loop's next iteration),
which adds the request to its slot's ``transferring`` set, then writes the request into
its connection's buffer (a connection kept alive: at once) and registers the transport
as a writer; the reactor's next I/O pass sends the bytes and unregisters it. Counting
reactor turns is not enough (Twisted's asyncio reactor may run its timed calls twice in
one loop iteration), so :func:`when_sent` watches these two steps, once a reactor turn
(after :data:`EAGER_TURNS` turns, every :data:`POLL` seconds):

1. the request is in its slot's ``transferring`` set: its bytes are in a buffer; the
   transports that became writers since it reached the downloader include its own
   (unless already sent);
2. none of those is a writer any more: every one sent its buffer, its own included.

Then the call runs. A request that left the downloader (done, failed) counts as sent;
after :data:`MAX_WATCH` seconds the call runs anyway (a transport that cannot send, or a
downloader unlike Scrapy's): the slot then waits at most its delay since that call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The longest a start's report waits for its request's bytes to leave (seconds).
MAX_WATCH = 2.0
#: Checked at every reactor turn this many times, then every POLL seconds (a request
#: queued in its Scrapy slot, or a slow transport: no busy loop).
EAGER_TURNS = 20
POLL = 0.01


def when_sent(
    reactor: Any, downloader: Any, request: Any, key: str, call: Callable[[], object]
) -> None:
    """Run ``call()`` once ``request``, which just reached ``downloader`` (its slot
    ``key``), was sent: see the module's docstring."""
    watch = SendWatch(reactor, downloader, request, key, call)
    reactor.callLater(0, watch.check)


class SendWatch:
    """The two steps of one request's sending, checked once a reactor turn."""

    def __init__(
        self, reactor: Any, downloader: Any, request: Any, key: str, call: Callable[[], object]
    ) -> None:
        self.reactor, self.downloader, self.request, self.key = reactor, downloader, request, key
        self.call = call
        #: The writers when it reached the downloader: not its transport's (a kept-alive
        #: connection is idle between requests: nothing of it left to send).
        self.before = set(reactor.getWriters())
        #: The transports whose buffers hold its bytes (None: not written yet).
        self.sending: set[Any] | None = None
        self.deadline = reactor.seconds() + MAX_WATCH
        self.turns = 0

    def check(self) -> None:
        writers = set(self.reactor.getWriters())
        if self.sending is None:
            slot = getattr(self.downloader, "slots", {}).get(self.key)
            if slot is not None and self.request in getattr(slot, "transferring", ()):
                self.sending = writers - self.before  # written (or already sent)
            elif slot is None or self.request not in getattr(slot, "active", ()):
                self.sending = set()  # left the downloader: sent (or never will be)
        done = self.sending is not None and not self.sending & writers
        if done or self.reactor.seconds() >= self.deadline:
            self.call()
        else:
            self.turns += 1
            self.reactor.callLater(0 if self.turns < EAGER_TURNS else POLL, self.check)
