"""robots.txt within the fleet's limits (SCHEDULER_FLEET_LIMITS with ROBOTSTXT_OBEY): the
special case of the gate of the downloads outside the scheduler (politeness.outside).

Scrapy's RobotsTxtMiddleware fetches each site's robots.txt in every worker, through
``engine.download()``: outside the scheduler, so no pop counted it. It fetches it when
the first request of the site reaches it, a request the scheduler handed out with a
start of its slot counted, which then waits for robots.txt. The gate gives robots.txt a
start of its slot as it gives any download outside the scheduler one; and

* if requests of the slot that this worker popped wait for it (the one that made
  RobotsTxtMiddleware fetch it, at least), robots.txt uses the in-flight place of one
  of them (they are not sent before it is done), and the start of theirs that the slot
  waits the report of, if any: it goes now, in its stead. Each of those requests (of a
  slot with a delay) then takes a start again, without a new place, before it reaches
  the downloader: its own start was used, or went by while it waited;
* the requests of a slot handed out before its robots.txt's ``Crawl-delay`` was known
  (their starts counted no delay) take a start again, under it.

Otherwise (robots.txt of a site fetched for a request of another slot, or for a
request that came from ``engine.download()``) it gets a place as any download outside
the scheduler does.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from scrapy.utils.httpobj import urlparse_cached

if TYPE_CHECKING:
    from scrapy import Request


def is_robots(request: Request) -> bool:
    """Whether ``request`` is a robots.txt fetch of RobotsTxtMiddleware."""
    return bool(request.meta.get("dont_obey_robotstxt")) and (
        urlparse_cached(request).path == "/robots.txt"
    )


class RobotsWaits:
    """The popped requests of one worker that wait for a robots.txt of their slot."""

    def __init__(self, pacing: Any) -> None:
        #: The worker's PolitePacing (politeness.pacing).
        self.pacing = pacing
        #: Popped requests whose start robots.txt used: they take one again, of this slot.
        self.again: weakref.WeakKeyDictionary[Request, str] = weakref.WeakKeyDictionary()
        #: robots.txt requests of slots with a delay, until they leave the downloader.
        self.fetching: weakref.WeakKeyDictionary[Request, str] = weakref.WeakKeyDictionary()

    def lenders(self, request: Request, slot: str, delayed: bool, queue: Any) -> list[str] | None:
        """For robots.txt ``request`` of ``slot``: the ids of the popped requests of its
        site that wait for it, whose place it uses (and the start the slot waits the
        report of, if one of theirs); None if none waits (it needs a place)."""
        if delayed:
            self.fetching[request] = slot
        waiting = self.waiting(slot)
        netloc = urlparse_cached(request).netloc
        if not any(urlparse_cached(popped).netloc == netloc for popped in waiting):
            return None
        return [queue.ids[popped] for popped in waiting if popped in queue.ids]

    def waiting(self, slot: str) -> list[Request]:
        """The popped requests of ``slot`` not in the downloader yet; if a robots.txt of
        the slot is being fetched, each will take a start again (its own start went by
        while it waited for robots.txt, or robots.txt used it)."""
        waiting = [r for r in self.pacing.unsent(slot) if not is_robots(r)]
        if slot in self.fetching.values():
            for popped in waiting:
                self.again[popped] = slot
        return waiting

    def delay_learned(self, slot: str) -> None:
        """The Crawl-delay of ``slot``'s site was just read from its robots.txt: the
        requests of the slot handed out before it was known (their starts counted no
        delay) and waiting for robots.txt take a start again, under it."""
        for popped in self.pacing.unsent(slot):
            if not is_robots(popped):
                self.again[popped] = slot

    def left(self, request: Request) -> None:
        """``request`` left the downloader: if it is a robots.txt of a slot with a delay,
        the requests of the slot waiting for it take a start again."""
        slot = self.fetching.get(request)
        if slot is not None:
            self.waiting(slot)
            del self.fetching[request]
