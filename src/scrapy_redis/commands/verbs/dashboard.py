"""Serve a live dashboard of the project's crawls, and Prometheus /metrics.

Listens on 127.0.0.1:6793 unless DASHBOARD_HOST / DASHBOARD_PORT (or --host / --port)
say otherwise; anything but a loopback address needs a token of 16 characters or more
(--token, or the environment variable SCRAPY_REDIS_DASHBOARD_TOKEN). Runs until
interrupted. See the docs' "Dashboard" page for its security model and its actions.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy_redis.dashboard import server

if TYPE_CHECKING:
    import argparse

    from scrapy_redis.commands.context import Context


def add_arguments(parser: argparse.ArgumentParser) -> None:
    server.add_arguments(parser)


def run(args: argparse.Namespace, context: Context) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s"
    )

    def announce(url: str, redis: str) -> None:
        if args.json:
            context.json({"url": url, "redis": redis})
        else:
            context.write(server.listening_line(url, redis))
        context.stdout.flush()

    return server.run(context.settings, args, announce)
