"""A live web dashboard of the crawls in Redis, with a Prometheus ``/metrics`` endpoint.

Start it with ``scrapy redis dashboard`` (or ``python -m scrapy_redis.dashboard``) in a
Scrapy project's directory, or call :func:`serve` and run the reactor. See ``docs/dashboard.rst``.
"""

from __future__ import annotations

from scrapy_redis.dashboard.server import serve

__all__ = ["serve"]
