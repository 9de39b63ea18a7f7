"""Values the fleet tools read from Redis, parsed and checked in one place.

Anyone who can write to the crawl's Redis can put anything there: a stats field
``abc``, a lane count of 100,000, a worker id that is not UTF-8, a string where a
hash is kept. The tools (``scrapy redis``, the dashboard) read through
:class:`Reader`, which turns what they cannot use into :class:`UnreadableValueError`
naming the key (and field) and what was found, and every value they print goes
through :func:`printable` (a worker id may hold terminal escapes).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

from redis.exceptions import ResponseError

from scrapy_redis.exceptions import ScrapyRedisError

T = TypeVar("T")

#: Characters shown of a value that cannot be used.
SHOWN = 40
#: The integers Redis keeps (a 64-bit signed integer has at most 19 digits).
_INTEGER = re.compile(r"-?[0-9]{1,19}")
#: Unicode categories escaped when printed: controls, formats (bidi overrides...),
#: surrogates, private use, unassigned, line and paragraph separators.
_HIDDEN = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")


class UnreadableValueError(ScrapyRedisError, ValueError):
    """A key (or one of its fields) holds what the tools cannot use: the message names
    the key and what was found."""

    def __init__(self, key: str, found: str, field: str | None = None) -> None:
        where = f"{printable(key)}" + ("" if field is None else f" field {printable(field)}")
        #: What is wrong, without the word "unreadable" (a view lists these under it).
        self.detail = f"{where} holds {found}"
        super().__init__(f"unreadable: {self.detail}")
        self.key = key
        self.field = field


def printable(value: Any) -> str:
    """``value`` (text, bytes: UTF-8, else escaped) with every character that a terminal
    or a log would not show as itself escaped (``\\x1b``, ``\\u202e``...)."""
    return _escape_hidden(text_of(value), _escaped)


def _escape_hidden(text: str, escape: Callable[[str], str]) -> str:
    """``text`` with each character a terminal or a log would not show as itself
    written as ``escape(char)``."""
    if text.isprintable():
        return text
    return "".join(escape(char) if unicodedata.category(char) in _HIDDEN else char for char in text)


def _escaped(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def text_of(value: Any) -> str:
    """``value`` as text: bytes decoded as UTF-8, what is not UTF-8 as ``\\xNN``."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return value if isinstance(value, str) else str(value)


def shown(value: Any) -> str:
    """What was found, quoted, printable and short (with its length if cut)."""
    text = text_of(value)
    if len(text) <= SHOWN:
        return repr(printable(text))
    return f"{printable(text[:SHOWN])!r}... ({len(text):,} characters)"


def integer(
    raw: Any, key: str, field: str | None = None, low: int | None = None, high: int | None = None
) -> int:
    """The integer ``raw`` holds (decimal text, as Redis keeps it), in ``low``..``high``;
    else :class:`UnreadableValueError`."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, (bytes, str)) and _INTEGER.fullmatch(text_of(raw)):
        value = int(raw)
    else:
        raise UnreadableValueError(key, f"{shown(raw)}, not an integer", field)
    if (low is not None and value < low) or (high is not None and value > high):
        raise UnreadableValueError(key, f"{value}, not in {low}..{high}", field)
    return value


def count_or_zero(raw: Any) -> int:
    """A count Redis holds as decimal text; 0 for none, or for a value that is not one
    (a bad value the scripts that keep the count replace), at least 0."""
    if isinstance(raw, (bytes, str)) and _INTEGER.fullmatch(text_of(raw)):
        return max(0, int(raw))
    return 0


def number(raw: Any, key: str, field: str | None = None) -> float:
    """The finite number ``raw`` holds (a number, or its text of at most :data:`SHOWN`
    characters); else :class:`UnreadableValueError`."""
    value = math.nan
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        value = float(raw) if abs(raw) < 1e308 else math.inf
    elif isinstance(raw, (bytes, str)) and len(raw) <= SHOWN:
        with suppress(ValueError):
            value = float(text_of(raw))
    if not math.isfinite(value):
        raise UnreadableValueError(key, f"{shown(raw)}, not a number", field)
    return value


def wrong_type(exc: ResponseError) -> bool:
    """Whether Redis refused a command for the type of its key."""
    return str(exc).startswith("WRONGTYPE")


class Reader:
    """Reads of one Redis (``server``) that name the key in what they raise. With a
    ``problems`` list, a read that fails there is recorded in it (one line each) and
    gives its default, so that a view shows everything else."""

    def __init__(self, server: Any, problems: list[str] | None = None) -> None:
        self.server = server
        self.problems = problems

    def read(self, key: str, kind: str, command: Callable[[], T], default: T) -> T:
        """``command()`` (a read of ``key``, which should hold a ``kind``)."""
        try:
            return command()
        except ResponseError as exc:
            if not wrong_type(exc):
                raise
            found = text_of(self.server.type(key))
            return self.failed(UnreadableValueError(key, f"a {found}, not a {kind}"), default)

    def parse(self, parse: Callable[[], T], default: T) -> T:
        """``parse()`` (a check of a value read), or ``default`` if it is unreadable."""
        try:
            return parse()
        except UnreadableValueError as exc:
            return self.failed(exc, default)

    def failed(self, exc: UnreadableValueError, default: T) -> T:
        if self.problems is None:
            raise exc
        if exc.detail not in self.problems:
            self.problems.append(exc.detail)
        return default

    def expect(self, key: str, kind: str, redis_type: str) -> None:
        """Check that ``key`` holds a ``redis_type`` (TYPE's name, "none" passes) before a
        script reads it as a ``kind`` (a script's WRONGTYPE names no key)."""
        found = self.type(key)
        if found not in ("none", redis_type):
            self.failed(UnreadableValueError(key, f"a {found}, not a {kind}"), None)

    def hgetall(self, key: str) -> dict[Any, Any]:
        return self.read(key, "hash", lambda: self.server.hgetall(key), {})

    def llen(self, key: str) -> int:
        return self.read(key, "list", lambda: int(self.server.llen(key)), 0)

    def scard(self, key: str) -> int:
        return self.read(key, "set", lambda: int(self.server.scard(key)), 0)

    def zcard(self, key: str) -> int:
        return self.read(key, "sorted set", lambda: int(self.server.zcard(key)), 0)

    def get(self, key: str) -> Any:
        return self.read(key, "string", lambda: self.server.get(key), None)

    def hget(self, key: str, field: str) -> Any:
        return self.read(key, "hash", lambda: self.server.hget(key, field), None)

    def zrange(self, key: str, **options: Any) -> list[Any]:
        return self.read(key, "sorted set", lambda: self.server.zrange(key, 0, -1, **options), [])

    def type(self, key: str) -> str:
        return text_of(self.server.type(key))


def printable_lines(text: str) -> str:
    """``text`` with each of its lines :func:`printable` (the line breaks kept)."""
    return "\n".join(printable(line) for line in text.split("\n"))


def printable_json(text: str) -> str:
    """A JSON document (``json.dumps()``, which escapes only the C0 controls) with every
    other character :func:`printable` would escape written as a ``\\u`` escape (all
    such characters are in strings: the rest of JSON is printable)."""
    return _escape_hidden(text, _json_escaped)


def _json_escaped(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
