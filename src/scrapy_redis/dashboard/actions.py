"""What the dashboard's push and requeue buttons do in Redis (its purge button calls
:func:`scrapy_redis.fleet.operations.purge_queue` as it is).

Plain functions of a Redis client and key names, free of web concerns, that scripts
may call too. The changes themselves are made by :mod:`scrapy_redis.fleet.operations`, which
the ``scrapy redis`` commands use as well: the push of start messages, the recovery of
expired leases, the purge of a queue (each one Redis command or one of the package's
Lua scripts). The messages pushed are checked as ``scrapy redis push`` checks them (one function:
:class:`~scrapy_redis.fleet.operations.MessageCheck`), as read by the default
``make_request_from_data()`` (a URL, or a JSON object with a ``url``: the command runs
the spider's own); the sums over several keys are the dashboard's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scrapy_redis import defaults
from scrapy_redis.exceptions import InvalidStartMessageError
from scrapy_redis.fleet.operations import MessageCheck, push_messages, recover_expired
from scrapy_redis.queues.deadletters import requeue_dead_letters
from scrapy_redis.queues.leases import Recovery
from scrapy_redis.start.messages import StartMessageRules


def check_messages(messages: Sequence[str], rules: StartMessageRules | None = None) -> list[str]:
    """The start messages to push, stripped; InvalidStartMessageError naming the first
    that ``scrapy redis push`` would refuse too
    (:class:`~scrapy_redis.fleet.operations.MessageCheck`: not a URL nor a JSON object
    with a ``url``, a scheme REDIS_START_URLS_SCHEMES does not allow, longer than
    REDIS_START_URLS_MAX_SIZE, an unknown key)."""
    checked = [message.strip() for message in messages if message.strip()]
    if not checked:
        raise InvalidStartMessageError("no message to push")
    check = MessageCheck(rules or StartMessageRules())
    for message in checked:
        check(message)
    return checked


def push_start_messages(
    server: Any,
    key: str,
    messages: Sequence[str],
    mode: str = "list",
    rules: StartMessageRules | None = None,
) -> int:
    """Push ``messages``, checked, to the start key ``key`` kept as ``mode`` ("list",
    "set" or "zset", see REDIS_START_URLS_AS_SET / _AS_ZSET); how many were added (a set
    or sorted set does not add a message twice). ``rules``: the spider's
    (REDIS_START_URLS_SCHEMES, REDIS_START_URLS_MAX_SIZE; default: the defaults)."""
    check = MessageCheck(rules or StartMessageRules())
    return push_messages(server, key, mode, check_messages(messages, rules), check=check)


def requeue_expired(
    server: Any,
    base_keys: Sequence[str],
    max_deliveries: int,
    dead_letters: bool = False,
    worker_timeout: float = defaults.SCHEDULER_WORKER_TIMEOUT,
) -> Recovery:
    """Put back the entries of expired leases (workers gone) of the queue or start keys
    ``base_keys`` now, as a live worker would do within SCHEDULER_WORKER_TIMEOUT; with
    ``dead_letters`` also the dead letters of those keys."""
    requeued = dead = 0
    for base_key in base_keys:
        recovery = recover_expired(server, base_key, worker_timeout, max_deliveries)
        requeued += recovery.requeued
        dead += recovery.dead_lettered
        if dead_letters:
            requeued += requeue_dead_letters(server, base_key)
    return Recovery(requeued, dead)
