"""How many requests a queue holds, read from its Redis key's type (for the tools that
look at a crawl from outside, see :mod:`scrapy_redis.fleet.status`): a list (FifoQueue,
LifoQueue), or a PriorityQueue's index of priorities with a list per priority, where
entries written by the original scrapy-redis may still sit in the index itself, or
the per-slot queues of SCHEDULER_FLEET_LIMITS (the queue key itself then holds nothing)."""

from __future__ import annotations

import math
from typing import Any

from redis.exceptions import ResponseError

from scrapy_redis.queues.priority import priority_of_member
from scrapy_redis.store.keys import priority_list_key, slot_queue_keys, slot_store_keys
from scrapy_redis.store.redis_values import (
    Reader,
    UnreadableValueError,
    count_or_zero,
    shown,
    text_of,
)

#: Requests waiting per priority.
Priorities = dict[int, int]
#: The priorities a PriorityQueue's index may name (its scores are Lua's doubles).
MAX_PRIORITY = 2**53


def queue_lengths(
    server: Any, queue_key: str, cluster: bool, reader: Reader | None = None
) -> tuple[str, int, Priorities | None]:
    """The Redis type of ``queue_key`` ("none" when absent), the requests waiting in it,
    and per priority for a priority queue. What cannot be read (a priority's list that
    is not a list, an index member naming no usable priority) is left out and said to
    ``reader`` (see :class:`~scrapy_redis.store.redis_values.Reader`)."""
    reader = reader or Reader(server)
    kind = reader.type(queue_key)
    if kind == "none":  # queued per download slot (SCHEDULER_FLEET_LIMITS), if at all
        inline = reader.zcard(slot_queue_keys(queue_key, cluster)[0])
        listed = reader.get(slot_store_keys(queue_key, cluster)[1])  # in lists (_slot_store.lua)
        return kind, inline + count_or_zero(listed), None
    if kind == "list":
        return kind, reader.llen(queue_key), None
    if kind != "zset":
        return kind, 0, None
    priorities = _priority_lengths(reader, queue_key, cluster)
    return kind, sum(priorities.values()), priorities


def _priority_lengths(reader: Reader, queue_key: str, cluster: bool) -> Priorities:
    counts: Priorities = {}
    lists: list[int] = []
    for member, score in reader.zrange(queue_key, withscores=True):
        try:
            priority = index_priority(queue_key, member)
        except UnreadableValueError as exc:
            reader.failed(exc, None)
            continue
        if priority is not None:
            lists.append(priority)
        elif math.isfinite(score):  # an original entry: its score is minus its priority
            counts[int(-score)] = counts.get(int(-score), 0) + 1
        else:
            reader.failed(UnreadableValueError(queue_key, f"a member of score {score}"), None)
    pipe = reader.server.pipeline(transaction=False)
    for priority in lists:
        pipe.llen(priority_list_key(queue_key, priority, cluster))
    replies = pipe.execute(raise_on_error=False) if lists else []
    for priority, length in zip(lists, replies, strict=True):
        key = priority_list_key(queue_key, priority, cluster)
        if isinstance(length, ResponseError):
            reader.read(key, "list", lambda e=length: _raise(e), 0)
            continue
        counts[priority] = counts.get(priority, 0) + int(length)
    return {priority: n for priority, n in counts.items() if n}


def index_priority(queue_key: str, member: Any) -> int | None:
    """The priority a PriorityQueue index member names (None: an original entry);
    :class:`~scrapy_redis.store.redis_values.UnreadableValueError` if it names one no worker
    writes (more than :data:`MAX_PRIORITY`)."""
    priority = priority_of_member(member)
    text = text_of(member)
    too_long = priority is None and text.lstrip("-").isdigit()
    if too_long or (priority is not None and abs(priority) > MAX_PRIORITY):
        raise UnreadableValueError(queue_key, f"the member {shown(text)}, no priority")
    return priority


def _raise(exc: Exception) -> int:
    raise exc
