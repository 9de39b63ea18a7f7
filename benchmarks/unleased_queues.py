"""Our queue classes with leases switched off, to measure what leases cost.

Our scheduler leases every request it pops (a Lua pop that also records the
lease, an ack script when the engine is done with the request, a heartbeat that
renews) only when the queue class says so: ``uses_leases`` (scrapy_redis.queue.Base),
declared by the class or, when it is not, derived from its methods (it pops through
``Base.pop_entries`` and does not override ``pop()``). A class that overrides
``pop()`` is popped with its own ``pop()`` and gets no leases. These subclasses
declare ``uses_leases = False`` and override ``pop()`` with nothing but a call to
the inherited one (what opts a queue out in versions of ours before the declared
attribute), so the scheduler pops them with a plain ``RPOP`` / ``LPOP`` /
``pop_priority`` script without lease arguments, and everything else (push,
serializer, dupefilter, worker registry and heartbeat, queue watcher) stays the
same.

Used by run.py (``ours-unleased``) as ``SCHEDULER_QUEUE_CLASS =
unleased_queues.UnleasedPriorityQueue`` etc., with ``benchmarks/`` on
``PYTHONPATH``; sched_bench.py imports it the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_redis.queue import FifoQueue, LifoQueue, PriorityQueue

if TYPE_CHECKING:
    from scrapy import Request


class UnleasedFifoQueue(FifoQueue):
    """FifoQueue popped without leases."""

    uses_leases = False

    def pop(self, timeout: int = 0) -> Request | None:
        return super().pop(timeout)


class UnleasedLifoQueue(LifoQueue):
    """LifoQueue popped without leases."""

    uses_leases = False

    def pop(self, timeout: int = 0) -> Request | None:
        return super().pop(timeout)


class UnleasedPriorityQueue(PriorityQueue):
    """PriorityQueue popped without leases."""

    uses_leases = False

    def pop(self, timeout: int = 0) -> Request | None:
        return super().pop(timeout)


__all__ = ["UnleasedFifoQueue", "UnleasedLifoQueue", "UnleasedPriorityQueue"]
