"""The Scrapy command ``scrapy redis <verb>`` (see :mod:`scrapy_redis.commands`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from redis.exceptions import ResponseError
from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.utils.project import inside_project

from scrapy_redis.commands import verb_help, verb_modules
from scrapy_redis.commands.context import CommandError, Context
from scrapy_redis.exceptions import ScrapyRedisError

if TYPE_CHECKING:
    from types import ModuleType


class Command(ScrapyCommand):
    """``scrapy redis <verb>``: one subcommand per module of ``commands/verbs``."""

    requires_project = True
    requires_crawler_process = False

    def syntax(self) -> str:
        return "<verb> [options] [args]"

    def short_desc(self) -> str:
        return "Operate the crawls in Redis (status, push, purge...)"

    def long_desc(self) -> str:
        verbs = ", ".join(verb_modules())
        return (
            f"Operate the project's crawls in Redis. Verbs: {verbs}. "
            'See "scrapy redis <verb> -h"; every verb takes --json.'
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        verbs = parser.add_subparsers(dest="verb", metavar="<verb>", title="verbs")
        for name, module in verb_modules().items():
            add_verb(verbs, name, module)

    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        if args:
            raise UsageError(f"unrecognized arguments: {' '.join(args)}")
        if opts.verb is None:
            raise UsageError("Name a verb.", print_help=True)

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if not inside_project():
            raise UsageError(
                "scrapy redis runs inside a Scrapy project (a directory with scrapy.cfg, "
                "or SCRAPY_SETTINGS_MODULE set): it reads the project's settings.",
                print_help=False,
            )
        assert self.settings is not None
        context = Context(self.settings)
        try:
            self.exitcode = verb_modules()[opts.verb].run(opts, context)
        except BrokenPipeError:  # `scrapy redis export ... | head`: the reader is gone
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # (no second error when Python exits)
            self.exitcode = 1
        except CommandError as exc:
            context.warn(f"error: {exc}")
            self.exitcode = 2
        except (ScrapyRedisError, ValueError, TypeError) as exc:
            context.warn(f"error: {exc}")
            self.exitcode = 1
        except ResponseError as exc:  # a key of another type read by a script...
            context.warn(f"error: Redis refused a command of {opts.verb}: {exc}")
            self.exitcode = 1


def add_verb(verbs: argparse._SubParsersAction, name: str, module: ModuleType) -> None:  # type: ignore[type-arg]
    """The sub-parser of one verb: ``--json``, ``-s`` and the verb's own arguments."""
    short, description = verb_help(module)
    parser = verbs.add_parser(
        name,
        help=short,
        description=f"{short}\n\n{description}".strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    # -s after the verb too (the global options go before it)
    parser.add_argument(
        "-s",
        "--set",
        action="append",
        default=argparse.SUPPRESS,
        metavar="NAME=VALUE",
        help="set/override setting (may be repeated)",
    )
    module.add_arguments(parser)
