"""Reading batches of start messages from one or more ``redis_key`` keys.

With several keys (highest priority first) the key being drained is read
until it is empty, then the first non-empty key in list order; with
``redis_key_check_interval`` a higher-priority key pre-empts the current one at
most that often. Each batch is one atomic Lua call, whatever the number of keys,
and the messages it pops are leased (see :mod:`scrapy_redis.queues.leases`) until the
spider has scheduled the requests made from them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from scrapy_redis.queues.leases import LeaseBook
from scrapy_redis.store.scripts import script

MODES = ("list", "set", "zset")


class StartUrlSource:
    """Pops start messages from ``keys`` in ``mode`` ("list", "set" or "zset")."""

    def __init__(
        self,
        server: Any,
        keys: Sequence[str],
        mode: str,
        check_interval: float = 0,
        recurring: Sequence[str] = (),
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown start-URL mode {mode!r}, expected one of {MODES}")
        self.server = server
        self.keys = list(keys)
        self.mode = mode
        self.check_interval = check_interval
        #: The recurring messages' keys (see start/recurring.py), claimed first; or none.
        self.recurring = list(recurring)
        self.current = 0  # 1-based index of the key being drained, 0: none yet
        self._last_scan = 0.0

    def pop(self, count: int, book: LeaseBook) -> tuple[str | None, list[bytes], list[str]]:
        """Up to ``count`` leased messages, the key they came from and their lease ids."""
        ticket = book.ticket(count)
        args = [
            self.mode,
            count,
            self._first_index(),
            ticket.timeout_ms,
            ticket.prefix,
            ticket.first,
            1 if self.recurring else 0,
        ]
        keys = [*book.keys, *self.keys, *self.recurring]
        reply = script("pop_start_messages")(self.server, keys, args)
        index = int(reply[0])
        if index == 0:
            return None, [], []
        messages = list(reply[1:])
        if index > len(self.keys):  # recurring messages due
            return self.recurring[0], messages, book.taken(ticket, len(messages))
        self.current = index
        return self.keys[index - 1], messages, book.taken(ticket, len(messages))

    def _first_index(self) -> int:
        if self.check_interval and time.monotonic() - self._last_scan >= self.check_interval:
            self._last_scan = time.monotonic()
            return 0
        return self.current
