"""What several verbs share (not a verb: its name starts with ``_``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_redis.keys import workers_key

if TYPE_CHECKING:
    import argparse

    from scrapy_redis.commands.crawl import Crawl


def add_spider_arguments(parser: argparse.ArgumentParser) -> None:
    """The positional SPIDER, and ``-a NAME=VALUE`` spider arguments (as ``scrapy crawl``:
    a spider argument such as ``redis_key`` changes the keys)."""
    parser.add_argument("spider", metavar="SPIDER", help="the spider's name")
    parser.add_argument(
        "-a",
        dest="spider_args",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="spider argument, as given to scrapy crawl (may be repeated)",
    )


def alive_workers(crawl: Crawl) -> list[str]:
    """The workers of the crawl whose registry entry has not expired (server clock)."""
    if not crawl.lanes:
        return []
    entries = crawl.server.hgetall(workers_key(crawl.queue_key, crawl.cluster))
    seconds, micros = crawl.server.time()
    now_ms = seconds * 1000 + micros // 1000
    alive = []
    for worker, deadline in entries.items():
        name = worker.decode() if isinstance(worker, bytes) else worker
        if not name.startswith("~") and float(deadline) >= now_ms:
            alive.append(name)
    return sorted(alive)
