"""Values from Redis or from requests, bounded before they reach a log line or an error.

A start message, a queue entry or a URL can be megabytes long; an error or a log
line quoting it whole floods the logs. Every such value goes through
:func:`short_repr` (a value shown as ``repr``) or :func:`shorten` (text, such as
an exception's message), which keep the first :data:`LIMIT` characters and say
how long the whole was.
"""

from __future__ import annotations

from typing import Any

#: Characters of a value kept in a log line or an error message.
LIMIT = 300


def shorten(text: Any, limit: int = LIMIT) -> str:
    """``str(text)``, cut to ``limit`` characters followed by ``… (N characters)``."""
    whole = str(text)
    if len(whole) <= limit:
        return whole
    return f"{whole[:limit]}… ({len(whole)} characters)"


def short_repr(value: Any, limit: int = LIMIT) -> str:
    """``repr(value)``, cut to ``limit`` characters followed by ``… (N bytes)`` (or
    characters, or items): the size of the value itself, not of its ``repr``.

    A long ``bytes`` or ``str`` is cut before ``repr`` is taken, so a huge value
    costs no huge string.
    """
    if isinstance(value, (bytes, bytearray, str)):
        head = value[: limit + 1]
        text = repr(bytes(head) if isinstance(head, bytearray) else head)
        unit = "characters" if isinstance(value, str) else "bytes"
        if len(value) <= limit and len(text) <= limit:
            return text
        return f"{text[:limit]}… ({len(value)} {unit})"
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters)"
