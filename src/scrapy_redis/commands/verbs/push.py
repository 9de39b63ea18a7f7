"""Push start messages to a spider's start key, checked as the spider would.

Each message (a URL, or a JSON object: see the spiders' docs) is given as an argument,
or one per line on stdin with ``-`` (blank lines are skipped). Every message is first
turned into requests by the spider's own ``make_request_from_data()``; if one fails, or
makes no request, the reasons are printed and nothing is pushed (``--skip-invalid``:
the valid ones are). Messages go to the spider's first start key (``--key``: another
of its keys) the way the spider reads it: RPUSH to a list, SADD to a set
(REDIS_START_URLS_AS_SET), ZADD with ``--score`` to a sorted set
(REDIS_START_URLS_AS_ZSET).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from scrapy_redis.commands.context import CommandError
from scrapy_redis.commands.verbs._common import add_spider_arguments
from scrapy_redis.core.logsafe import shorten
from scrapy_redis.fleet.operations import push_messages
from scrapy_redis.start.messages import as_requests

if TYPE_CHECKING:
    import argparse

    from scrapy_redis.commands.context import Context
    from scrapy_redis.commands.crawl import Crawl


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_spider_arguments(parser)
    parser.add_argument("messages", nargs="+", metavar="MESSAGE", help="messages, or - for stdin")
    parser.add_argument("--key", help="the start key to push to (default: the spider's first)")
    parser.add_argument(
        "--score", type=float, default=0.0, help="score of the messages in a sorted set"
    )
    parser.add_argument(
        "--skip-invalid", action="store_true", help="push the valid messages, skip the others"
    )


def run(args: argparse.Namespace, context: Context) -> int:
    crawl = context.crawl(args.spider, args.spider_args)
    key = _start_key(crawl, args.key)
    messages = list(_messages(args.messages, context))
    refused = [(m, reason) for m in messages if (reason := refusal(crawl, m)) is not None]
    if refused and not args.skip_invalid:
        _report(context, args, key, 0, refused)
        return 1
    bad = {message for message, _ in refused}
    pushed = push(crawl, key, [m for m in messages if m not in bad], args.score)
    _report(context, args, key, pushed, refused)
    return 1 if refused else 0


def _start_key(crawl: Crawl, wanted: str | None) -> str:
    if not crawl.start_keys:
        raise CommandError(
            f"The spider {crawl.name!r} does not read start messages from Redis: make it a "
            "scrapy_redis.spiders.RedisSpider (or RedisCrawlSpider)."
        )
    if wanted is None:
        return crawl.start_keys[0]
    if wanted not in crawl.start_keys:
        raise CommandError(
            f"--key {wanted!r} is not a start key of {crawl.name}: {crawl.start_keys}"
        )
    return wanted


def _messages(given: list[str], context: Context) -> Iterator[str]:
    for message in given:
        if message == "-":
            yield from (line.rstrip("\r\n") for line in context.stdin if line.strip())
        else:
            yield message


def refusal(crawl: Crawl, message: str) -> str | None:
    """Why the spider would skip ``message`` (None: it makes requests of it)."""
    spider: Any = crawl.spider
    encoding = spider.redis_encoding or "utf-8"
    try:
        requests = as_requests(spider.make_request_from_data(message.encode(encoding)))
    except Exception as exc:  # as the spider does: any failure makes the message invalid
        return shorten(exc)
    return None if requests else "the spider makes no request of it"


def push(crawl: Crawl, key: str, messages: list[str], score: float) -> int:
    """Push ``messages`` to ``key`` as the spider reads it; how many were added."""
    return push_messages(crawl.server, key, crawl.start_mode, messages, score)


def _report(
    context: Context,
    args: argparse.Namespace,
    key: str,
    pushed: int,
    refused: list[tuple[str, str]],
) -> None:
    if args.json:
        invalid = [{"message": message, "reason": reason} for message, reason in refused]
        context.json({"key": key, "pushed": pushed, "refused": invalid})
        return
    for message, reason in refused:
        context.warn(f"invalid: {message}: {reason}")
    if refused and not pushed:
        context.warn(
            f"Nothing pushed: {_messages_count(len(refused))} refused "
            "(--skip-invalid pushes the others)."
        )
    else:
        context.write(f"Pushed {_messages_count(pushed)} to {key}.")


def _messages_count(count: int) -> str:
    return f"{count} message" if count == 1 else f"{count} messages"
