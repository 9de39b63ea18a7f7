"""Stat values as stored in the shared hash, and the updates not written yet.

Values keep their type: integers and floats are stored as decimal text
(``HINCRBY`` and ``HINCRBYFLOAT`` work on them), datetimes as ISO-8601 text in
UTC, strings as they are (unless they would read back as another type), and
anything else (bool, None, lists, dicts) as ``json:<JSON>``. A :class:`Backlog`
holds the updates a worker has not written yet, merged per stat.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

_JSON = "json:"
_INT = re.compile(r"-?\d+")
_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?([+-]\d{2}:\d{2})?")


def encode_value(value: Any) -> str:
    """The text stored for a stat value."""
    if isinstance(value, bool) or value is None:
        return _JSON + json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(timezone.utc)
        return str(value.isoformat())
    if isinstance(value, str):
        plain = decode_value(value)
        return value if type(plain) is str and plain == value else _JSON + json.dumps(value)
    return _JSON + json.dumps(value, default=str)


def decode_value(raw: Any) -> Any:
    """The stat value stored as ``raw`` (bytes or str)."""
    text = raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else raw
    try:
        return _decoded(text)
    except (ValueError, RecursionError):  # anyone may write there: kept as the text
        return text


def _decoded(text: str) -> Any:
    """``text`` as the value it encodes (ValueError: no value of that form: a datetime
    past the calendar, an integer of more digits than Python converts...)."""
    if _INT.fullmatch(text):
        return int(text)
    if text.startswith(_JSON):
        return json.loads(text[len(_JSON) :])
    if _DATETIME.fullmatch(text):
        return datetime.fromisoformat(text)
    return float(text)


class Backlog:
    """Stat updates not written yet (buffered, or Redis unreachable), merged per stat."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.increments: dict[str, tuple[float, float]] = {}
        self.bounds: dict[str, tuple[str, Any]] = {}

    def __bool__(self) -> bool:
        return bool(self.values or self.increments or self.bounds)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value
        self.increments.pop(key, None)
        self.bounds.pop(key, None)

    def inc(self, key: str, count: float, start: float) -> None:
        if isinstance(self.values.get(key), (int, float)):
            self.values[key] += count
            return
        total, first = self.increments.get(key, (0, start))
        self.increments[key] = (total + count, first)

    def bound(self, key: str, value: Any, mode: str) -> None:
        if key in self.values:
            self.values[key] = pick(mode, self.values[key], value)
        elif key in self.bounds:
            self.bounds[key] = (mode, pick(mode, self.bounds[key][1], value))
        else:
            self.bounds[key] = (mode, value)

    def applied_to(self, stats: dict[str, Any]) -> dict[str, Any]:
        """``stats`` as they will be once the backlog is replayed."""
        stats = {**stats, **self.values}
        for key, (count, start) in self.increments.items():
            stats[key] = stats.get(key, start) + count
        for key, (mode, value) in self.bounds.items():
            stats[key] = pick(mode, stats[key], value) if key in stats else value
        return stats


def pick(mode: str, current: Any, value: Any) -> Any:
    """What ``max_value()`` (``mode`` "max") or ``min_value()`` ("min") leaves of a stat
    holding ``current``: the greater (smaller) one; ``value`` if they do not compare."""
    try:
        return max(current, value) if mode == "max" else min(current, value)
    except TypeError:
        return value
