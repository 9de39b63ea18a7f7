"""Pickle serializer, as in the original scrapy-redis (opt-in, unsafe).

Select it with ``SCHEDULER_SERIALIZER = "scrapy_redis.picklecompat"`` to read
queues written by the original package. Never use it with a Redis that someone
you do not trust can write to: unpickling runs arbitrary code.
"""

from __future__ import annotations

import pickle
from typing import Any


def loads(s: bytes) -> Any:
    return pickle.loads(s)


def dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
