"""Forget URLs: remove their fingerprints, so that the next time they are found they are crawled.

Each URL is given as an argument, or one per line on stdin with ``-`` (blank lines are
skipped). Its fingerprint is computed as the workers compute it (the project's settings,
the spider's ``custom_settings``: REQUEST_FINGERPRINTER_CLASS, or the original's algorithm
on the canonical URL) for a GET request of it, and removed from the crawl's duplicate
filter: RFPDupeFilter's set (or sorted set, with DUPEFILTER_LIFETIME), LeanDupeFilter's
buckets, in the lane that holds it when the crawl is split (with SCHEDULER_FLEET_LIMITS,
the lane of the URL's download slot). A Bloom filter cannot forget
(shared bits): the command says so, and what to do instead. Workers may run meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from scrapy_redis.commands.verbs._common import add_spider_arguments
from scrapy_redis.fleet.forget import crawl_slot_of, forget_requests

if TYPE_CHECKING:
    import argparse

    from scrapy_redis.commands.context import Context


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_spider_arguments(parser)
    parser.add_argument("urls", nargs="+", metavar="URL", help="URLs, or - for stdin")


def run(args: argparse.Namespace, context: Context) -> int:
    crawl = context.crawl(args.spider, args.spider_args)
    urls = list(dict.fromkeys(_urls(args.urls, context)))
    found = forget_requests(crawl.filters, urls, crawl_slot_of(crawl.settings, crawl.spider))
    unknown = [url for url, was in zip(urls, found, strict=True) if not was]
    if args.json:
        context.json({"forgotten": len(urls) - len(unknown), "not_recorded": unknown})
        return 0
    for url in unknown:
        context.warn(f"not recorded: {url}")
    forgotten = len(urls) - len(unknown)
    context.write(f"Forgot {forgotten} of {len(urls)} URLs of {crawl.name}.")
    return 0


def _urls(given: list[str], context: Context) -> Iterator[str]:
    for url in given:
        if url == "-":
            yield from (line.strip() for line in context.stdin if line.strip())
        else:
            yield url
