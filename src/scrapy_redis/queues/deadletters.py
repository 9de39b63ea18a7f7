"""Dead letters: requests that every worker taking them died with.

A leased request whose worker stops responding goes back to the queue; after
SCHEDULER_MAX_DELIVERIES such deliveries it is moved to ``<queue key>:dead``
instead (see :mod:`scrapy_redis.queues.leases`), one msgpack record per request: where
it goes back to, and the entry as the queue stored it. These functions look at
them and put them back::

    import redis
    from scrapy_redis.queues.deadletters import dead_letters, requeue_dead_letters

    server = redis.Redis.from_url("redis://localhost:6379")
    for letter in dead_letters(server, "myspider:requests"):
        print(letter.request_dict()["url"])
    requeue_dead_letters(server, "myspider:requests")  # all of them, oldest first
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from redis.client import NEVER_DECODE
from redis.exceptions import ResponseError

from scrapy_redis.connection import is_cluster
from scrapy_redis.queues.records import id_priority, member_parts, record_keys, unpack_record
from scrapy_redis.serializers import Serializer, msgpack_serializer
from scrapy_redis.store.keys import dead_letters_key
from scrapy_redis.store.scripts import script

# How often requeue_dead_letters() reads the list again when another requeue changed it.
_MAX_CONFLICTS = 10


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead request: the request as stored in the queue, and where it goes back."""

    #: The serialized request (SCHEDULER_SERIALIZER's bytes).
    data: bytes
    #: The key it was popped from (a priority queue's list of one priority).
    key: str
    #: The priority it had in a priority queue or per-slot queue (None for a list queue).
    priority: int | None
    #: Its download slot, in the per-slot queues (SCHEDULER_FLEET_LIMITS), else None.
    slot: str | None = None

    def request_dict(self, serializer: Serializer = msgpack_serializer) -> dict[str, Any]:
        """The stored request as a dict (``url``, ``method``, ``meta``...); pass the
        crawl's SCHEDULER_SERIALIZER if it is not the default."""
        decoded: dict[str, Any] = serializer.loads(self.data)
        return decoded


def dead_letters(server: Any, queue_key: str, start: int = 0, stop: int = -1) -> list[DeadLetter]:
    """The dead letters of the queue ``queue_key`` (its final name), oldest first."""
    raws = server.execute_command(
        "LRANGE",
        dead_letters_key(queue_key, is_cluster(server)),
        start,
        stop,
        **{NEVER_DECODE: True},
    )
    return [_letter(raw) for raw in raws]


def requeue_dead_letters(server: Any, queue_key: str, count: int | None = None) -> int:
    """Put the oldest ``count`` (default: all) dead letters back in the queue, at the end
    popped next; how many went back."""
    key = dead_letters_key(queue_key, is_cluster(server))
    total = conflicts = 0
    while (count is None or total < count) and conflicts < _MAX_CONFLICTS:
        batch = 500 if count is None else min(500, count - total)
        raws = server.execute_command("LRANGE", key, 0, batch - 1, **{NEVER_DECODE: True})
        if not raws:
            break
        keys = sorted({name for raw in raws for name in record_keys(raw)})
        try:
            total += int(script("dead_requeue")(server, [key, *keys], [len(raws)]))
        except ResponseError as exc:
            if "read the list again" not in str(exc):
                raise
            # Another requeue changed the list between the read and the script: again.
            conflicts += 1
    return total


def _letter(raw: bytes) -> DeadLetter:
    record = unpack_record(raw)
    (entry,) = record.entries  # one entry per dead letter
    data = cast(bytes, entry)
    if record.op != b"slot":
        return DeadLetter(data, record.key, record.priority)
    parts = None if record.arg else member_parts(data)  # (written as the member before)
    if parts is not None:
        slot, member_id, data = parts
        return DeadLetter(data, record.key, id_priority(member_id), _text(slot))
    return DeadLetter(data, record.key, record.priority, _text(record.key2))


def _text(slot: bytes) -> str:
    return slot.decode("utf-8", "replace")
