"""Recurring start messages from outside a crawl: made recurring, stopped, listed
(``scrapy redis push --every``, ``--cancel``, ``status``, the dashboard). The keys and
how the workers serve them: :mod:`scrapy_redis.start.recurring`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scrapy_redis.start.recurring import RecurringMessages, message_every

if TYPE_CHECKING:
    from scrapy_redis.fleet.operations import MessageCheck


def push_recurring(
    server: Any,
    start_key: str,
    messages: Sequence[str],
    every: float | None,
    check: MessageCheck | None = None,
) -> int:
    """Make ``messages`` recurring for the spider whose first start key is ``start_key``,
    every ``every`` seconds (None: each message's own ``"every"``), the first run due
    now; how many were not recurring already. Every message is checked first (``check``:
    InvalidStartMessageError naming one refused, and nothing is made recurring)."""
    intervals: dict[float, list[str]] = {}
    for message in messages:
        if check is not None:
            check(message)
        interval = every if every is not None else message_every(message)
        if interval is None:
            raise ValueError(f"{message!r:.80} has no 'every': give --every")
        intervals.setdefault(interval, []).append(message)
    recurring = RecurringMessages(server, start_key)
    return sum(recurring.add(group, interval) for interval, group in intervals.items())


def cancel_recurring(server: Any, start_key: str, given: Sequence[str]) -> int:
    """Stop the recurring messages that are one of ``given``, or whose URL is; how many
    there were."""
    recurring = RecurringMessages(server, start_key)
    wanted = set(given)
    members = server.zrange(recurring.key, 0, -1)
    matched = [m for m in members if _text(m) in wanted or _url(_text(m)) in wanted]
    return recurring.cancel(matched)


def has_every(message: str) -> bool:
    """Whether ``message`` asks to recur (a JSON object with ``"every"``); its value is
    checked with the message."""
    try:
        return message_every(message) is not None
    except ValueError:
        return True


def _url(message: str) -> str | None:
    if not message.lstrip().startswith("{"):
        return None
    try:
        fields = json.loads(message)
    except ValueError:
        return None
    url = fields.get("url") if isinstance(fields, dict) else None
    return url if isinstance(url, str) else None


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
