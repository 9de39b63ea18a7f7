"""The type each Redis key of a crawl must have, checked before the crawl uses it.

A key of another type (a queue key left by another SCHEDULER_QUEUE_CLASS, a
string written by hand) makes every command on it fail with ``WRONGTYPE``; the
check turns that into one error that names the key, the setting and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from scrapy_redis.exceptions import WrongKeyTypeError


@dataclass(frozen=True, slots=True)
class KeyUse:
    """A key, the Redis type the crawl keeps there, and the setting that names it."""

    key: str
    type: str
    setting: str


def is_wrong_type(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis's answer to a command on a key of another type."""
    return isinstance(exc, ResponseError) and "WRONGTYPE" in str(exc)


def wrong_types(server: Any, uses: Sequence[KeyUse]) -> list[tuple[KeyUse, str]]:
    """The keys of ``uses`` that exist with another type, with the type found (one
    round trip)."""
    if not uses:
        return []
    pipe = server.pipeline(transaction=False)
    for use in uses:
        pipe.type(use.key)
    found = [t.decode() if isinstance(t, bytes) else str(t) for t in pipe.execute()]
    pairs = zip(uses, found, strict=True)
    return [(use, kind) for use, kind in pairs if kind not in ("none", use.type)]


def check_key_types(server: Any, uses: Sequence[KeyUse]) -> None:
    """Raise :class:`WrongKeyTypeError` if a key of ``uses`` exists with another type."""
    if wrong := wrong_types(server, uses):
        raise WrongKeyTypeError(describe(wrong))


def describe(wrong: Sequence[tuple[KeyUse, str]]) -> str:
    """What is wrong with each key and how to fix it, in one message."""
    return " ".join(
        f"Redis key {use.key!r} holds a {kind}, where scrapy-redis keeps a {use.type} (the "
        f"key named by {use.setting}). Delete it (redis-cli UNLINK '{use.key}') if its data "
        f"is not needed, or set {use.setting} to another key."
        for use, kind in wrong
    )
