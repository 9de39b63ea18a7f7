"""What a verb works with (see :mod:`scrapy_redis.commands` for the protocol)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from redis.exceptions import NoPermissionError

from scrapy_redis import connection, defaults
from scrapy_redis.commands.crawl import Crawl, open_crawl
from scrapy_redis.commands.progress import Progress
from scrapy_redis.fleet.crawl_keys import SpiderServers, spider_settings
from scrapy_redis.fleet.status import spider_loader
from scrapy_redis.spiders import RedisMixin
from scrapy_redis.start.settings import normalize_redis_key
from scrapy_redis.store.keys import format_key
from scrapy_redis.store.permissions import check_keys
from scrapy_redis.store.redis_values import printable_json, printable_lines

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.settings import Settings


class CommandError(Exception):
    """A usage error: the command prints it and exits with code 2."""


@dataclass
class Context:
    """The project's settings, Redis, the spiders, and the terminal."""

    settings: Settings
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    stdin: TextIO = field(default_factory=lambda: sys.stdin)
    _server: Any = None
    _servers: SpiderServers | None = None

    def spider_servers(self) -> SpiderServers:
        """Each spider's Redis client (the project's, or its own ``custom_settings``'),
        made once: ``watch`` asks every second."""
        if self._servers is None:
            self._servers = SpiderServers(self.settings, self.server())
        return self._servers

    def server(self) -> Any:
        """The Redis client of the project's settings (REDIS_URL...), checked reachable."""
        if self._server is None:
            server = connection.from_settings(self.settings)
            connection.ensure_reachable(server)
            self._server = server
        return self._server

    def client(self) -> Any:
        """The Redis client of the project's settings, reachable or not."""
        return self._server if self._server is not None else connection.from_settings(self.settings)

    def fail(self, error: object, exit_code: int, as_json: bool = False) -> int:
        """Report ``error`` as one line on stderr (and with ``--json`` as a JSON document on
        stdout: ``{"error": "...", "exit_code": N}``); the exit code."""
        message = " ".join(str(error).split())  # one line, whatever the error's text
        self.warn(f"error: {message}")
        if as_json:
            self.json({"error": message, "exit_code": exit_code})
        return exit_code

    def spider_names(self) -> list[str]:
        """The project's spiders (SPIDER_MODULES)."""
        return sorted(spider_loader(self.settings).list())

    def spider_class(self, name: str) -> type[Spider]:
        """The spider class called ``name``; CommandError naming the known ones."""
        try:
            spidercls: type[Spider] = spider_loader(self.settings).load(name)
        except KeyError:
            known = ", ".join(self.spider_names()) or "none (check SPIDER_MODULES)"
            raise CommandError(
                f"No spider named {name!r} in this project; spiders: {known}"
            ) from None
        return spidercls

    def crawl(self, name: str, spider_args: list[str] | None = None) -> Crawl:
        """The crawl of the spider ``name`` (its queue, filters, start keys...)."""
        server = self.server()  # fail first, naming the server, if Redis cannot be reached
        spidercls = self.spider_class(name)
        try:
            return open_crawl(self.settings, spidercls, parse_spider_args(spider_args))
        except NoPermissionError:  # which key? (the reads of open_crawl do not say)
            check_keys(server, main_keys(self.settings, spidercls), "the command")
            raise

    def write(self, text: str = "") -> None:
        """A line of text for people on stdout (what a terminal would not show as itself
        escaped: values read from Redis may hold terminal escapes)."""
        self.stdout.write(printable_lines(text) + "\n")

    def warn(self, text: str) -> None:
        """A line on stderr (refusals, what was left undone), printable as ``write()``."""
        self.stderr.write(printable_lines(text) + "\n")

    def json(self, document: Any) -> None:
        """One JSON document on one line of stdout (``--json``; every character a
        terminal would not show as itself written as a ``\\u`` escape)."""
        text = json.dumps(jsonable(document), ensure_ascii=False)
        self.stdout.write(printable_json(text) + "\n")
        self.stdout.flush()

    def progress(self, label: str, total: int | None = None) -> Progress:
        """A progress bar on stderr (drawn only on a terminal)."""
        return Progress(self.stderr, label, total)

    def confirm(self, question: str, yes: bool) -> bool:
        """``yes`` (``--yes`` given), or the answer of a person at a terminal; CommandError
        when there is nobody to ask (stdin is not a terminal)."""
        if yes:
            return True
        if not self.stdin.isatty():
            raise CommandError(f"{question} Not asked (stdin is not a terminal): add --yes.")
        self.stderr.write(f"{question} [y/N] ")
        self.stderr.flush()
        return self.stdin.readline().strip().lower() in ("y", "yes")


def main_keys(settings: Settings, spidercls: type[Spider]) -> list[str]:
    """The keys a crawl's others derive from: its queue, filter, items and start keys."""
    merged, name = spider_settings(settings, spidercls), spidercls.name
    templates = [
        merged.get("SCHEDULER_QUEUE_KEY") or defaults.SCHEDULER_QUEUE_KEY,
        merged.get("SCHEDULER_DUPEFILTER_KEY") or defaults.SCHEDULER_DUPEFILTER_KEY,
        merged.get("REDIS_ITEMS_KEY") or defaults.PIPELINE_KEY,
    ]
    keys = [format_key(template, name) for template in templates]
    if issubclass(spidercls, RedisMixin):
        start = spidercls.redis_key or merged.get("REDIS_START_URLS_KEY", defaults.START_URLS_KEY)
        keys += normalize_redis_key(start, name)
    return keys


def parse_spider_args(pairs: list[str] | None) -> dict[str, str]:
    """``-a NAME=VALUE`` options as a dict; CommandError for one without ``=``."""
    args: dict[str, str] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CommandError(f"Invalid -a value {pair!r}, use -a NAME=VALUE")
        args[name] = value
    return args


def jsonable(value: Any) -> Any:
    """``value`` as what ``json`` writes: bytes (keys too) as text, sets and tuples as
    lists, anything else unknown as its repr."""
    if isinstance(value, dict):
        return {_text(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(item) for item in value]
    if isinstance(value, bytes):
        return _text(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return value if isinstance(value, str) else str(value)
