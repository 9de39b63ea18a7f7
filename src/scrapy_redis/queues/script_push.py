"""The steps our queue classes' push scripts share: a batch of new requests checked and
pushed in one call (:func:`push_plan`: may a script do it, under which write number), and
entries put back or pushed in chunks, each call applied once (:func:`send_chunks`).

Each queue class keeps its own keys and arguments; these are the parts around them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from scrapy_redis.queues.base import PUSH_CHUNK, Base, Candidate, FilterArgs, Seen, filter_args
from scrapy_redis.store.writes import WriteIds


@dataclass(slots=True)
class PushPlan:
    """A push of new requests by one script call (see :meth:`Base.push_new`)."""

    #: The filter's part of the call (its keys and arguments, per candidate a token).
    filter: FilterArgs
    #: The key of the record of this writer's writes (named after the filter).
    record: str
    #: The number of the write (the same when the call is sent again).
    write: int


def push_plan(
    queue: Base,
    candidates: Sequence[Candidate],
    seen: Seen,
    write: int | None,
    queue_keys: Sequence[str],
) -> PushPlan | None:
    """How ``queue`` pushes ``candidates`` checked against ``seen`` by one script call
    touching ``queue_keys``; None when no script may (the filter is not checked in a
    script, or the keys are in several hash slots of a Redis Cluster): the caller takes
    :meth:`Base.push_new`'s path. ``write``: the number given, else the next one."""
    first = filter_args(seen, candidates)
    if first is None:
        return None
    record = queue.writes.key(first.base)
    if not queue.scripts_may_use(*queue_keys, record, *first.keys):
        return None
    return PushPlan(first, record, queue.writes.take() if write is None else write)


def send_chunks(
    writes: WriteIds,
    datas: Sequence[Any],
    identity: tuple[Hashable, ...],
    send: Callable[[list[Any], int], Any],
) -> None:
    """``send(chunk, number)`` for each chunk of :data:`PUSH_CHUNK` of ``datas``, each
    applied once: the same chunk after a failed call (an outage) is that call sent again,
    under its number (``identity``, what else the call writes, tells it apart)."""
    for start in range(0, len(datas), PUSH_CHUNK):
        chunk = list(datas[start : start + PUSH_CHUNK])
        send(chunk, writes.take_for((*identity, *chunk)))
        writes.confirmed()
