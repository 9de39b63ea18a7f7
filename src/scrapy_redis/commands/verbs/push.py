"""Push start messages to a spider's start key, checked as the spider would.

Each message (a URL, or a JSON object: see the spiders' docs) is given as an argument,
or one per line on stdin with ``-`` (blank lines are skipped). Every message is first
turned into requests by the spider's own ``make_request_from_data()``; if one fails,
makes no request, names a URL scheme REDIS_START_URLS_SCHEMES does not allow, is longer
than REDIS_START_URLS_MAX_SIZE, or (read by the default ``make_request_from_data()``)
has a key that is none of the documented ones (a typo such as ``"calback"``, which a
worker would send as form data; ``--force`` pushes it all the same), the reasons are
printed and nothing is pushed (``--skip-invalid``: the valid ones are). Messages go to
the spider's first start key (``--key``: another of its keys) the way the spider reads
it: RPUSH to a list, SADD to a set (REDIS_START_URLS_AS_SET), ZADD with ``--score`` to
a sorted set (REDIS_START_URLS_AS_ZSET).

``--every DURATION`` (``3600``, ``90s``, ``30m``, ``1h``, ``2d``) makes the messages
recurring: served at once, then once per interval across the fleet (a JSON message with
an ``"every"`` key recurs without it). ``--cancel`` stops the recurring messages given
(their text, or their URL). ``scrapy redis status`` lists them with their next run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from scrapy_redis.commands.context import CommandError
from scrapy_redis.commands.verbs._common import add_spider_arguments
from scrapy_redis.core.logsafe import shorten
from scrapy_redis.fleet.operations import MessageCheck, push_messages
from scrapy_redis.fleet.recurring import cancel_recurring, has_every, push_recurring
from scrapy_redis.start.messages import StartMessageRules
from scrapy_redis.start.recurring import EVERY_KEY, parse_every

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
    parser.add_argument(
        "--every",
        metavar="DURATION",
        help="make the messages recurring: every DURATION (3600, 90s, 30m, 1h, 2d)",
    )
    parser.add_argument(
        "--cancel",
        action="store_true",
        help="stop the recurring messages given (their text, or their URL)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="push JSON messages with unknown keys (a worker sends them as form data)",
    )


def run(args: argparse.Namespace, context: Context) -> int:
    crawl = context.crawl(args.spider, args.spider_args)
    key = _start_key(crawl, args.key)
    messages = list(_messages(args.messages, context))
    if args.cancel:
        return _cancel(context, args, crawl, messages)
    every = _every(args)
    check = message_check(crawl, args.force)
    refused = [(m, reason) for m in messages if (reason := check.refusal(m)) is not None]
    if refused and not args.skip_invalid:
        _report(context, args, key, 0, refused)
        return 1
    bad = {message for message, _ in refused}  # (sets made once: a push may hold millions)
    good = [m for m in messages if m not in bad]
    recurring = good if every is not None else [m for m in good if has_every(m)]
    repeated = set(recurring)
    once = [m for m in good if m not in repeated]
    pushed = push(crawl, key, once, args.score, check) if once else 0
    if recurring:  # the recurring messages of a spider: under its first start key
        added = push_recurring(crawl.server, crawl.start_keys[0], recurring, every, check)
        _report_recurring(context, args, crawl, len(recurring), added)
    _report(context, args, key, pushed, refused, len(recurring))
    return 1 if refused else 0


def _every(args: argparse.Namespace) -> float | None:
    """The interval of --every, in seconds (None: not given); CommandError if invalid."""
    if args.every is None:
        return None
    if args.key is not None:
        raise CommandError(
            "--key does not apply to --every: recurring messages are kept under the "
            "spider's first start key (<key>:recurring), whatever key they came from."
        )
    try:
        return parse_every(args.every)
    except ValueError as exc:
        raise CommandError(f"--every: {str(exc).replace(repr(EVERY_KEY), 'it')}") from None


def _cancel(context: Context, args: argparse.Namespace, crawl: Crawl, given: list[str]) -> int:
    removed = cancel_recurring(crawl.server, crawl.start_keys[0], given)
    if args.json:
        context.json({"cancelled": removed})
    elif removed:
        context.write(f"Stopped {_messages_count(removed)} recurring.")
    else:
        context.warn("No recurring message matched (scrapy redis status lists them).")
    return 0 if removed else 1


def _report_recurring(
    context: Context, args: argparse.Namespace, crawl: Crawl, count: int, added: int
) -> None:
    if args.json:
        return
    again = count - added
    note = f" ({again} recurring already: next run kept)" if again else ""
    context.write(
        f"Made {_messages_count(count)} recurring for {crawl.name}, first run due now{note}."
    )


def message_check(crawl: Crawl, allow_unknown_keys: bool = False) -> MessageCheck:
    """The check of a message as the crawl's spider reads it, with its settings' rules."""
    rules = StartMessageRules.from_settings(crawl.settings)
    return MessageCheck(rules, crawl.spider, allow_unknown_keys)


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
    """Why the spider would skip ``message``, or push refuses it (None: neither)."""
    return message_check(crawl).refusal(message)


def push(
    crawl: Crawl, key: str, messages: list[str], score: float, check: MessageCheck | None = None
) -> int:
    """Push ``messages`` to ``key`` as the spider reads it; how many were added."""
    check = check or message_check(crawl)
    return push_messages(crawl.server, key, crawl.start_mode, messages, score, check)


def _report(
    context: Context,
    args: argparse.Namespace,
    key: str,
    pushed: int,
    refused: list[tuple[str, str]],
    recurring: int = 0,
) -> None:
    if args.json:
        invalid = [{"message": shorten(message), "reason": reason} for message, reason in refused]
        made = {"recurring": recurring} if recurring else {}  # (the output before it)
        context.json({"key": key, "pushed": pushed, **made, "refused": invalid})
        return
    if recurring and not pushed and not refused:
        return
    for message, reason in refused:
        context.warn(f"invalid: {shorten(message)}: {reason}")
    if refused and not pushed:
        context.warn(
            f"Nothing pushed: {_messages_count(len(refused))} refused "
            "(--skip-invalid pushes the others)."
        )
    else:
        context.write(f"Pushed {_messages_count(pushed)} to {key}.")


def _messages_count(count: int) -> str:
    return f"{count} message" if count == 1 else f"{count} messages"
