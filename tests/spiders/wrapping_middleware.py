"""A downloader middleware of the FlareSolverr pattern (see test_nested_requests_e2e.py).

Each request is replaced, before it is downloaded, by a new one that carries the
original in its ``meta`` (``dont_filter``: the engine schedules it again, through
the Redis queue); the new one is downloaded as it comes.
"""

from __future__ import annotations

from typing import Any

from scrapy import Request


class WrapInMeta:
    def process_request(self, request: Request, spider: Any = None) -> Request | None:
        if "original_request" in request.meta:
            return None
        meta = {**request.meta, "original_request": request}
        return request.replace(meta=meta, dont_filter=True)
