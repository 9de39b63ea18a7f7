"""A queue class of a project's own (test_keys_left_e2e.py): a subclass of PriorityQueue
with its own ``push`` and ``pop``, as projects written for the original have. With its
own ``push``, the scheduler records fingerprints with the filter's ``request_seen()``."""

from __future__ import annotations

from typing import Any

from scrapy_redis.queue import PriorityQueue


class OwnPushPopQueue(PriorityQueue):
    def push(self, request: Any) -> None:
        super().push(request)

    def pop(self, timeout: int = 0) -> Any:
        return super().pop(timeout)
