"""The shared request queues: FIFO, LIFO and priority.

Every queue stores serialized requests (see :mod:`scrapy_redis.serializers`)
under one key, and reads what the original scrapy-redis wrote there when
SCHEDULER_SERIALIZER can decode it:

* :class:`FifoQueue` and :class:`LifoQueue`: a list; ``LPUSH`` to add, ``RPOP``
  (FIFO) or ``LPOP`` (LIFO) to take, as the original did.
* :class:`PriorityQueue`: one list per priority (``<key>:prio:<n>``) plus a
  sorted set at ``<key>`` indexing the non-empty priorities. Higher Scrapy
  priority first, oldest first within a priority, identical requests kept apart.
  Entries the original stored directly in that sorted set are popped in their
  priority order too.

This module is where they are imported from (SCHEDULER_QUEUE_CLASS). They live in:

* :mod:`scrapy_redis.queues.base`: :class:`Base` (the queue contract, the batch
  protocol the scheduler uses with leases), :class:`Entry`, :class:`Candidate`;
* :mod:`scrapy_redis.encoding.codec`: requests to stored bytes and back, with the diagnosis
  of undecodable entries (``Base._encode_request()`` / ``_decode_request()``);
* :mod:`scrapy_redis.queues.lists` and :mod:`scrapy_redis.queues.priority`: the queues;
* :mod:`scrapy_redis.queues.records`: the lease records the pop scripts return.
"""

from __future__ import annotations

import warnings
from typing import Any

from scrapy_redis.exceptions import ScrapyRedisDeprecationWarning
from scrapy_redis.queues.base import Base, Candidate, Entry
from scrapy_redis.queues.lists import FifoQueue, LifoQueue
from scrapy_redis.queues.priority import PriorityQueue


def _deprecated_alias(name: str, cls: type[Base]) -> type[Base]:
    """A subclass of ``cls`` that warns when instantiated under its old ``name``."""

    def __init__(self: Base, *args: Any, **kwargs: Any) -> None:
        warnings.warn(
            f"scrapy_redis.queue.{name} is deprecated, use scrapy_redis.queue.{cls.__name__}",
            ScrapyRedisDeprecationWarning,
            stacklevel=2,
        )
        cls.__init__(self, *args, **kwargs)

    return type(name, (cls,), {"__init__": __init__, "__doc__": f"Deprecated: {cls.__name__}."})


# Named where they are imported from, as before the split (reprs, pickles, docs).
for _cls in (Base, Candidate, Entry, FifoQueue, LifoQueue, PriorityQueue):
    _cls.__module__ = __name__

SpiderQueue = _deprecated_alias("SpiderQueue", FifoQueue)
SpiderStack = _deprecated_alias("SpiderStack", LifoQueue)
SpiderPriorityQueue = _deprecated_alias("SpiderPriorityQueue", PriorityQueue)

__all__ = [
    "Base",
    "Candidate",
    "Entry",
    "FifoQueue",
    "LifoQueue",
    "PriorityQueue",
    "SpiderPriorityQueue",
    "SpiderQueue",
    "SpiderStack",
]
