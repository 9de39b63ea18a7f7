"""How many requests a queue holds, read from its Redis key's type (for the tools that
look at a crawl from outside, see :mod:`scrapy_redis.status`): a list (FifoQueue,
LifoQueue), or a PriorityQueue's index of priorities with a list per priority, where
entries written by the original scrapy-redis may still sit in the index itself, or
the per-slot queues of SCHEDULER_FLEET_LIMITS (the queue key itself then holds nothing)."""

from __future__ import annotations

from typing import Any

from scrapy_redis.keys import priority_list_key, slot_queue_keys
from scrapy_redis.queue_priority import priority_of_member
from scrapy_redis.utils import bytes_to_str

#: Requests waiting per priority.
Priorities = dict[int, int]


def queue_lengths(server: Any, queue_key: str, cluster: bool) -> tuple[str, int, Priorities | None]:
    """The Redis type of ``queue_key`` ("none" when absent), the requests waiting in it,
    and per priority for a priority queue."""
    kind = bytes_to_str(server.type(queue_key))
    if kind == "none":  # queued per download slot (SCHEDULER_FLEET_LIMITS), if at all
        return kind, int(server.zcard(slot_queue_keys(queue_key, cluster)[0])), None
    if kind == "list":
        return kind, int(server.llen(queue_key)), None
    if kind != "zset":
        return kind, 0, None
    priorities = _priority_lengths(server, queue_key, cluster)
    return kind, sum(priorities.values()), priorities


def _priority_lengths(server: Any, queue_key: str, cluster: bool) -> Priorities:
    counts: Priorities = {}
    lists: list[int] = []
    for member, score in server.zrange(queue_key, 0, -1, withscores=True):
        priority = priority_of_member(member)
        if priority is None:  # an original entry: its score is minus its priority
            counts[int(-score)] = counts.get(int(-score), 0) + 1
        else:
            lists.append(priority)
    pipe = server.pipeline(transaction=False)
    for priority in lists:
        pipe.llen(priority_list_key(queue_key, priority, cluster))
    for priority, length in zip(lists, pipe.execute() if lists else [], strict=True):
        counts[priority] = counts.get(priority, 0) + int(length)
    return {priority: n for priority, n in counts.items() if n}
