#!/usr/bin/env python
"""Print the items that RedisPipeline pushes to Redis, taking them off the list.

Usage::

    python process_items.py mycrawler_redis:items [--url redis://localhost:6379]
        [--timeout 5] [--limit 0] [--progress-every 100] [-v]

Pops items with BLPOP, waiting ``--timeout`` seconds at a time, until
``--limit`` items were processed (0: until Ctrl-C). Prints ``name<TAB>url`` for
each item, or the whole item with ``-v``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

from scrapy_redis import get_redis
from scrapy_redis.connection import describe_server

logger = logging.getLogger("process_items")


def describe(item: Any) -> str:
    """``name<TAB>url`` of an item (or of the fields the original example used)."""
    if not isinstance(item, dict):
        return repr(item)
    name = item.get("name") or item.get("title") or ""
    url = item.get("url") or item.get("link") or ""
    return f"{name}\t{url}"


def process_items(
    server: Any,
    keys: list[str],
    timeout: int = 5,
    limit: int = 0,
    progress_every: int = 100,
    verbose: bool = False,
) -> int:
    """Pop and print items until ``limit`` (0: forever); returns how many were processed."""
    processed = 0
    started = time.monotonic()
    while limit <= 0 or processed < limit:
        reply = server.blpop(keys, timeout)
        if reply is None:
            logger.debug("No item in %.0f seconds, still waiting", timeout)
            continue
        key, data = reply
        try:
            item = json.loads(data)
        except ValueError:
            logger.warning("Not a JSON item in %s: %r", key, data[:200])
            continue
        print(json.dumps(item, ensure_ascii=False) if verbose else describe(item), flush=True)
        processed += 1
        if progress_every and processed % progress_every == 0:
            rate = processed / max(time.monotonic() - started, 1e-9)
            logger.info("Processed %d items (%.1f items/s)", processed, rate)
    return processed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the items scraped into Redis lists.")
    parser.add_argument("key", nargs="+", help="Redis list(s) of items, e.g. mycrawler_redis:items")
    parser.add_argument(
        "--url",
        default=os.environ.get("REDIS_URL", "redis://localhost:6379"),
        help="Redis server (default: $REDIS_URL or %(default)s)",
    )
    parser.add_argument("--timeout", type=int, default=5, help="BLPOP timeout in seconds")
    parser.add_argument("--limit", type=int, default=0, help="stop after N items (0: never)")
    parser.add_argument(
        "--progress-every", type=int, default=100, help="log progress every N items"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print whole items")
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s [%(name)s] %(levelname)s: %(message)s"
    )
    logger.setLevel(logging.DEBUG if args.verbose else logging.INFO)
    server = get_redis(url=args.url, decode_responses=True)
    logger.info("Waiting for items in %s on %s", ", ".join(args.key), describe_server(server))
    try:
        count = process_items(
            server, args.key, args.timeout, args.limit, args.progress_every, args.verbose
        )
    except KeyboardInterrupt:
        return 0
    logger.info("Processed %d items", count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
