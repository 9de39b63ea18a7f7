"""Bad values found in the per-slot queues' keys (``<queue key>:polite:*``): the scripts
replace them and keep going (see ``lua/_slots.lua``, "Bad values"), count them in
``<queue key>:polite:corrupt``, and the next pop hands the count to its worker, which
logs each kind once and counts them in its stats (``scheduler/fleet/corrupt_state``)."""

from __future__ import annotations

import logging
import time
from typing import Any

from scrapy_redis.store.keys import derived, invalid_entries_key, slot_queue_keys
from scrapy_redis.store.scripts import script

logger = logging.getLogger(__name__)

#: Stat counting the bad values this worker's pops reported (one more per kind, below).
STAT = "scheduler/fleet/corrupt_state"

#: Per kind: the key (after ``<queue key>:polite:``) and what was done.
KINDS: dict[str, tuple[str, str]] = {
    "state": (
        "slots",
        "a slot's state that is not one was replaced by a fresh state "
        "(its downloads in flight count again from 0)",
    ),
    "element": (
        "q:*",
        "a list element too short to be a queued request was taken out and handed to "
        "a worker as an undecodable entry (set aside in <queue key>:invalid)",
    ),
    "seq": (
        "seq",
        "a sequence counter that is not one was restarted from the Redis server's clock",
    ),
    "more": (
        "more",
        "the count of the requests in lists that is not one was restarted "
        "(the queue's length shown is short by what the lists held)",
    ),
    "corrupt": ("corrupt", "this count of bad values, not one itself, was replaced"),
    "ready": ("ready", "a member naming no ready slot was removed"),
    "member": ("pq", "a member naming no slot was set aside in <queue key>:invalid"),
    "unplaced": ("slots", "a slot with requests that no pop would reach was placed again"),
    "list": (
        "lists",
        "a group whose list is gone left the index (its pointer, if queued, was set aside "
        "as an undecodable entry in <queue key>:invalid)",
    ),
    "unlisted": ("pq", "a list whose pointer was gone got it back"),
    "waiting": ("waiting", "a slot whose state does not wait was removed"),
}


class CorruptValues:
    """Logs (once per kind) and counts the bad values a pop reports."""

    def __init__(self, queue_key: str, cluster: bool, stats: Any = None) -> None:
        self.base = derived(queue_key, "polite:", cluster)
        self.invalid = invalid_entries_key(queue_key, cluster)
        self.stats = stats
        self.logged: set[str] = set()

    def found(self, reply: list[Any]) -> list[str]:
        """``reply``: kind, count, ... and ``slot:<slot>``, 1 per slot whose state was
        replaced (from pop_slots.lua); those slots."""
        slots: list[str] = []
        for raw_kind, raw_count in zip(reply[::2], reply[1::2], strict=False):
            kind = bytes(raw_kind).decode("utf-8", "replace")
            if kind.startswith("slot:"):
                slots.append(kind[5:])
                continue
            count = int(raw_count)
            if self.stats is not None:
                self.stats.inc_value(STAT, count)
                self.stats.inc_value(f"{STAT}/{kind}", count)
            if kind not in self.logged:
                self.logged.add(kind)
                self._log(kind, count)
        return slots

    def _log(self, kind: str, count: int) -> None:
        name, done = KINDS.get(kind, (kind, "a bad value was replaced"))
        logger.warning(
            "Bad value in Redis (%(count)d so far): in %(key)s, %(done)s; further ones are "
            "counted in the stat %(stat)s, not logged",
            {
                "count": count,
                "key": self.base + name,
                "done": done.replace("<queue key>:invalid", self.invalid),
                "stat": STAT,
            },
        )


class Sweeper:
    """Looks over the per-slot queues for requests no pop reaches (``sweep_slots.lua``),
    a chunk at a time, when a pop found nothing to take and no slot waiting: at once,
    then every :attr:`every` seconds once the whole queue was looked over."""

    #: Entries of ``pq`` looked at per call.
    chunk = 1000
    #: Seconds between two sweeps of the whole queue.
    every = 10.0

    def __init__(self, server: Any, queue_key: str, cluster: bool) -> None:
        self.server = server
        self.keys = [
            *slot_queue_keys(queue_key, cluster)[:4],
            invalid_entries_key(queue_key, cluster),
        ]
        self.cursor = b"-"
        self.next_at = 0.0

    def sweep(self) -> bool:
        """One chunk, if due; whether it set aside or placed anything."""
        if time.monotonic() < self.next_at:
            return False
        cursor, fixed = script("sweep_slots")(self.server, self.keys, [self.cursor, self.chunk])
        self.cursor = bytes(cursor) or b"-"
        if self.cursor == b"-":
            self.next_at = time.monotonic() + self.every
        return int(fixed) > 0
