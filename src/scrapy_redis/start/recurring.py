"""Recurring start messages: served again every interval (a feed, a sitemap, a listing).

A start message with an ``"every"`` key (seconds, or ``"90s"``, ``"30m"``, ``"1h"``,
``"2d"``) recurs, and so does a message pushed with ``scrapy redis push --every``. They
are kept in two keys derived from the spider's first start key, in its slot
(:func:`~scrapy_redis.store.keys.recurring_key`): the sorted set ``<key>:recurring``
(message -> next run, ms on the Redis server's clock) and the hash
``<key>:recurring:every`` (message -> interval, ms).

The spiders' pop script (``lua/pop_start_messages.lua``) claims the messages due
before any other: it leases each one as a start message (acknowledged once its
requests are scheduled; a worker that dies holding it makes that run due again) and
sets its next run, in one call: a run is served once across the fleet, and the next
run is the first one after now on the message's schedule (first run + n intervals),
so a late run never brings the next one nearer. The requests made from a run do not
meet the duplicate filter (``dont_filter``): the page is fetched every time; the pages
it links to meet the filter as usual, and are fetched again once their fingerprints
have expired (DUPEFILTER_LIFETIME, or ``meta["dupefilter_lifetime"]``).

A message with ``"every"`` that reaches a worker from a start key (pushed by hand) is
served and made recurring from then on (its next run one interval later).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scrapy_redis.connection import is_cluster
from scrapy_redis.exceptions import InvalidStartMessageError
from scrapy_redis.store.keys import recurring_every_key, recurring_key
from scrapy_redis.store.scripts import script

#: The message key asking for a recurring message.
EVERY_KEY = "every"
#: The shortest interval, in seconds.
MIN_EVERY = 1.0
#: The longest interval, in seconds (about 31 years: the pop script drops a member whose
#: interval is not below 1e15 ms, as written by hand).
MAX_EVERY = 1e9
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)


def parse_every(value: Any) -> float:
    """An interval in seconds: a number, or a string such as ``"90"``, ``"90s"``,
    ``"30m"``, ``"1h"``, ``"2d"``; InvalidStartMessageError unless it is at least
    :data:`MIN_EVERY` and at most :data:`MAX_EVERY` seconds."""
    seconds = _seconds(value)
    if seconds is None or not math.isfinite(seconds) or not MIN_EVERY <= seconds <= MAX_EVERY:
        raise InvalidStartMessageError(
            f"'{EVERY_KEY}' must be seconds from {MIN_EVERY:g} to {MAX_EVERY:g} or a duration "
            f"such as '30m', '1h', '2d', not {value!r:.60}"
        )
    return seconds


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and (match := _DURATION.match(value)):
        return float(match.group(1)) * _UNITS[(match.group(2) or "s").lower()]
    return None


def message_every(data: bytes | str, encoding: str = "utf-8") -> float | None:
    """The interval a message asks for (seconds), None if it does not recur (not a JSON
    object, or no ``"every"``); InvalidStartMessageError if its ``"every"`` is not one."""
    text = data.decode(encoding, "replace") if isinstance(data, bytes) else data
    if not text.lstrip().startswith("{"):
        return None
    try:
        fields = json.loads(text)
    except ValueError:
        return None  # the reader of the message says why
    if not isinstance(fields, dict) or fields.get(EVERY_KEY) is None:
        return None
    return parse_every(fields[EVERY_KEY])


@dataclass(frozen=True, slots=True)
class Recurring:
    """One recurring message: its text, interval and next run (POSIX seconds, the
    server's clock)."""

    message: str
    every: float
    next_run: float

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "every": self.every, "next_run": self.next_run}


class RecurringMessages:
    """The recurring start messages of the spider whose first start key is ``start_key``."""

    def __init__(self, server: Any, start_key: str) -> None:
        self.server = server
        cluster = is_cluster(server)
        self.key = recurring_key(start_key, cluster)
        self.every_key = recurring_every_key(start_key, cluster)

    @property
    def keys(self) -> list[str]:
        """The sorted set and the hash (the last keys of the pop script)."""
        return [self.key, self.every_key]

    def add(self, messages: Sequence[str | bytes], every: float, first_in: float = 0.0) -> int:
        """Make ``messages`` recur every ``every`` seconds, the first run ``first_in``
        seconds from now (one already recurring keeps its next run); how many are new."""
        if not messages:
            return 0
        args = [int(every * 1000), int(first_in * 1000), *messages]
        return int(script("recurring_add")(self.server, self.keys, args))

    def cancel(self, messages: Sequence[str | bytes]) -> int:
        """Stop ``messages`` recurring; how many were."""
        if not messages:
            return 0
        return int(script("recurring_cancel")(self.server, self.keys, list(messages)))

    def count(self) -> int:
        return int(self.server.zcard(self.key))

    def next_run(self) -> float | None:
        """When the next run is due (POSIX seconds), None if none recurs."""
        first = self.server.zrange(self.key, 0, 0, withscores=True)
        return float(first[0][1]) / 1000 if first else None

    def listed(self, limit: int = 100) -> list[Recurring]:
        """The first ``limit`` recurring messages, next due first."""
        pairs = self.server.zrange(self.key, 0, limit - 1, withscores=True)
        if not pairs:
            return []
        members = [member for member, _ in pairs]
        intervals = self.server.hmget(self.every_key, members)
        return [
            Recurring(_text(member), _number(ms) / 1000, float(score) / 1000)
            for (member, score), ms in zip(pairs, intervals, strict=True)
        ]


def serve_run(requests: list[Any]) -> None:
    """The requests of a run of a recurring message (or of a message asking to recur) are
    not filtered: the page is fetched every run."""
    for request in requests:
        request.dont_filter = True


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _number(value: Any) -> float:
    """A number read from Redis (nan if it is none)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
