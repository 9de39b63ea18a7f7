"""Requests handed out a little before their slot's start, held by the worker until then.

The pop script may hand a worker a request of a slot whose next start is at most
SCHEDULER_FLEET_EARLY away (``pop_slots.lua``, "1:<ms>"), with the time it may start.
The request goes through the engine and the downloader middlewares at once; when it
reaches the downloader, its downloader slot (Scrapy's, one per download slot) is held
until that time: the slot's ``latercall``, which Scrapy's downloader sets itself to wait
a slot's delay, is set to let it go then (the slot's own delay is 0 under fleet-wide
limits). So the pop's round trip, the engine and the middlewares, some tens of
milliseconds on a busy worker and more with heavy middlewares, overlap with the slot's
delay instead of adding to every gap between two requests to the site. The start is
then watched and reported as any other (``politeness.sent``).

A downloader unlike Scrapy's (no ``slots`` with a ``latercall``, no ``_process_queue``)
cannot hold: the worker then asks for requests only once their slot may start.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def can_hold(downloader: Any) -> bool:
    """Whether ``downloader`` is one whose slots :class:`SlotHolds` can hold."""
    return callable(getattr(downloader, "_process_queue", None)) and isinstance(
        getattr(downloader, "slots", None), dict
    )


@dataclass
class Hold:
    """One downloader slot held: the call letting it go, when, and what to run then."""

    call: Any
    until: float
    then: list[Callable[[], object]] = field(default_factory=list)


class SlotHolds:
    """The downloader slots of one worker held until their requests may start."""

    def __init__(self, downloader: Any, reactor: Any, spider: Callable[[], Any]) -> None:
        self.downloader = downloader
        self.reactor = reactor
        self._held: dict[str, Hold] = {}
        process = downloader._process_queue
        # Scrapy < 2.14 (or so) takes the spider first: _process_queue(spider, slot)
        takes_spider = len(inspect.signature(process).parameters) >= 2
        self._process: Callable[[Any], object] = (
            (lambda slot: process(spider(), slot)) if takes_spider else process
        )

    def hold(self, key: str, until: float, then: Callable[[], object]) -> bool:
        """Hold downloader slot ``key`` until ``until`` (time.monotonic()), then run
        ``then()`` and let the slot start its requests. False if it has no such slot
        (``then`` not run)."""
        slot = self.downloader.slots.get(key)
        if slot is None or not hasattr(slot, "latercall"):
            return False
        held = self._held.get(key)
        if held is not None and held.call.active():
            held.then.append(then)
            self.extend(key, until)
            return True
        scrapys = slot.latercall  # waiting for a delay of its own: ours lets it go instead
        if scrapys is not None and getattr(scrapys, "active", lambda: True)():
            scrapys.cancel()
        wait = max(0.0, until - time.monotonic())
        call = self.reactor.callLater(wait, self._release, key, slot)
        slot.latercall = call
        self._held[key] = Hold(call, until, [then])
        return True

    def extend(self, key: str, until: float) -> None:
        """A slot held now is held until ``until`` at least (a Retry-After)."""
        held = self._held.get(key)
        if held is not None and held.call.active() and until > held.until:
            held.until = until
            held.call.reset(max(0.0, until - time.monotonic()))

    def _release(self, key: str, slot: Any) -> None:
        held = self._held.pop(key, None)
        if slot.latercall is (held.call if held else None):
            slot.latercall = None
        for then in held.then if held else ():
            then()
        self._process(slot)
