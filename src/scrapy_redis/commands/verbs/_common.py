"""What several verbs share (not a verb: its name starts with ``_``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_redis.scheduling import workers

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
    """The workers of the crawl whose registry entry has not expired."""
    return workers.alive_workers(crawl.server, crawl.queue_key)
