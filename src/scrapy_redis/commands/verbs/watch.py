"""Show the status of a spider's crawl (or of all), refreshed every second.

The ``status`` view, redrawn in place on a terminal every ``--interval`` seconds
until Ctrl-C (or ``--count`` refreshes). ``--json``: one line ``{"time": <unix time>,
"spiders": [...]}`` per refresh, for a script or a log.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from scrapy_redis.commands.verbs.status import read_statuses, render

if TYPE_CHECKING:
    import argparse

    from scrapy_redis.commands.context import Context

#: Clear the terminal and go to its top-left corner.
CLEAR = "\x1b[H\x1b[2J"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spider", nargs="?", metavar="SPIDER", help="one spider (default: all)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")
    parser.add_argument("--count", type=int, default=0, help="stop after this many (0: never)")


def run(args: argparse.Namespace, context: Context) -> int:
    shown = 0
    try:
        while True:
            refresh(args, context)
            shown += 1
            if args.count and shown >= args.count:
                return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def refresh(args: argparse.Namespace, context: Context) -> None:
    """Show the status once (redrawn over the last on a terminal)."""
    statuses = read_statuses(context, args.spider)
    if args.json:
        context.json({"time": time.time(), "spiders": [s.to_json() for s in statuses]})
        return
    screen = "\n\n".join("\n".join(render(status)) for status in statuses)
    stamp = time.strftime("%H:%M:%S")
    clear = CLEAR if context.stdout.isatty() else ""
    context.stdout.write(f"{clear}{stamp}  scrapy redis watch (Ctrl-C to stop)\n\n{screen}\n")
    context.stdout.flush()
