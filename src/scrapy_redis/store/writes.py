"""Writes applied at most once, however often they are sent.

redis-py sends a command again when its reply does not come (the default
REDIS_PARAMS retry once: a dropped connection, a server stalled for longer than
``socket_timeout``), and the server may have run the first copy. Our own
replays after an outage send again what may have been written before the
reply was lost. So every write that is not idempotent by nature (pushing items
and requests, incrementing stats) is a Lua script that carries a write number:

* each writer (a pipeline, a stats collector, a queue) has a unique id and
  numbers its writes 1, 2, 3... in the order it sends them; a write sent again
  keeps its number;
* the script records, in the string key ``<data key>:writes:<writer>`` (see
  :func:`scrapy_redis.store.keys.writes_key`: same Cluster slot as the data key), the
  number of the writer's last write applied and its reply (``_once.lua``);
* a write whose number is not above the recorded one was applied already: the
  script answers the recorded reply and writes nothing.

The record expires :func:`writes_ttl` seconds after the writer's last write to
that key (twice REDIS_OUTAGE_TIMEOUT, from a minute to a day): longer than
redis-py's retry (two ``socket_timeout``) and than our replays, which stop when
the outage has lasted REDIS_OUTAGE_TIMEOUT. So one small key per writer and data key
exists while a worker writes; a component deletes its records when it closes
(:meth:`WriteIds.forget`), and those of a worker that dies expire.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from scrapy_redis import defaults
from scrapy_redis.store.keys import writes_key
from scrapy_redis.store.stand_ins import delete_keys

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def new_worker_id() -> str:
    """A writer's (and a worker's) unique, readable id: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


_MIN_TTL, _MAX_TTL = 60.0, 86400.0
_KEYS_CACHED = 1024


def writes_ttl(settings: BaseSettings | None = None) -> float:
    """Seconds a write's record is kept: twice REDIS_OUTAGE_TIMEOUT, from a minute to a day."""
    timeout = float(defaults.REDIS_OUTAGE_TIMEOUT)
    if settings is not None:
        timeout = settings.getfloat("REDIS_OUTAGE_TIMEOUT", timeout)
    return min(_MAX_TTL, max(_MIN_TTL, 2 * timeout))


class WriteIds:
    """The numbers of one writer's writes, and the keys their records go to."""

    def __init__(self, ttl: float | None = None, writer: str | None = None) -> None:
        self.writer = writer or new_worker_id()
        self.ttl_ms = int((writes_ttl() if ttl is None else ttl) * 1000)
        self._next = 1
        self._keys: dict[str, str] = {}
        self._unconfirmed: tuple[Hashable, int] | None = None

    def take(self, count: int = 1) -> int:
        """Reserve ``count`` consecutive numbers; the first of them."""
        first = self._next
        self._next += count
        return first

    def take_for(self, write: Hashable) -> int:
        """The number of ``write`` (a value standing for what it writes): that of the last
        write taken this way if it was the same and is not :meth:`confirmed` (its call
        failed: this is it, sent again), else a new one."""
        if self._unconfirmed is not None and self._unconfirmed[0] == write:
            return self._unconfirmed[1]
        number = self.take()
        self._unconfirmed = (write, number)
        return number

    def confirmed(self) -> None:
        """The write numbered by :meth:`take_for` was applied (its call returned)."""
        self._unconfirmed = None

    def key(self, data_key: str) -> str:
        """The record key of this writer's writes to ``data_key``."""
        key = self._keys.get(data_key)
        if key is None:
            if len(self._keys) >= _KEYS_CACHED:  # items routed to many lists
                self._keys.clear()
            key = self._keys[data_key] = writes_key(data_key, self.writer)
        return key

    def forget(self, server: Any) -> None:
        """Delete this writer's records, once it writes no more: its calls have returned,
        so none of its writes can be sent again (a worker that dies leaves them to expire)."""
        keys = list(self._keys.values())
        self._keys.clear()
        if keys:
            delete_keys(server, *keys)
