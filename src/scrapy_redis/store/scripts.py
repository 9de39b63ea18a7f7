"""Lua scripts, one per ``lua/<name>.lua`` file, run atomically on the server.

Each file starts with a header naming its ``KEYS``, ``ARGV`` and return value.
A line ``--#include _<name>.lua`` is replaced by that file (and its own includes;
each file once per script): helpers shared by several scripts (``_``-prefixed
files are not scripts).
Scripts run by ``EVALSHA`` (falling back to ``EVAL`` once after a server
restart emptied the script cache) and their replies are never decoded, so
binary queue entries survive a client created with ``decode_responses=True``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from functools import cache
from importlib import resources
from typing import Any

from redis.client import NEVER_DECODE
from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError

from scrapy_redis.store.stand_ins import check_client

_INCLUDE = re.compile(r"^--#include (_\w+\.lua)$", re.MULTILINE)


def read_lua(filename: str) -> str:
    """The text of the file ``filename`` of the ``scrapy_redis.store.lua`` package data."""
    return resources.files("scrapy_redis.store.lua").joinpath(filename).read_text()


def _expand(text: str, included: set[str], read: Callable[[str], str]) -> str:
    """``text`` with its include lines replaced by the files they name (read with
    ``read``), expanded too; a file already in ``included`` (included earlier, or
    including itself) is left out."""

    def include(match: re.Match[str]) -> str:
        filename = match.group(1)
        if filename in included:
            return f"-- {filename}: included above"
        included.add(filename)
        return _expand(read(filename), included, read)

    return _INCLUDE.sub(include, text)


def source(name: str, read: Callable[[str], str] = read_lua) -> str:
    """The text of ``lua/<name>.lua``, its includes expanded (each file once): what is
    sent to Redis. ``read`` (filename -> text) reads the files: :func:`read_lua`."""
    return _expand(read(f"{name}.lua"), set(), read)


class LuaScript:
    """A script of the ``scrapy_redis.store.lua`` package data."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = source(name)
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    def __call__(self, client: Any, keys: list[str], args: list[Any]) -> Any:
        """Run the script on ``client`` (a client or a cluster client);
        ScriptsUnavailableError, before anything runs, if ``client`` is a test's stand-in
        that cannot run it (see :mod:`scrapy_redis.store.stand_ins`)."""
        check_client(client, self.name)
        options = {NEVER_DECODE: True}
        try:
            return client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args, **options)
        except NoScriptError:
            return client.execute_command("EVAL", self.source, len(keys), *keys, *args, **options)

    def __repr__(self) -> str:
        return f"LuaScript({self.name!r})"


@cache
def script(name: str) -> LuaScript:
    """The (cached) script ``lua/<name>.lua``."""
    return LuaScript(name)


#: A script call to pipeline: the script, its keys, its args.
ScriptCall = tuple[LuaScript, list[str], list[Any]]


def run_pipelined(client: Any, calls: Sequence[ScriptCall]) -> list[Any]:
    """Run ``calls`` on ``client`` in one pipeline (no transaction): one round trip, or on
    a Redis Cluster one per master holding their keys, sent to all before any reply is
    read. Each call is atomic as alone, not the calls together. The calls the server
    did not know the script of (restarted) are sent again in full, in a second round
    trip. Their replies in order; the first error raised."""
    for lua, _, _ in calls:
        check_client(client, lua.name)
    replies = _pipeline(client, [(lua.sha, keys, args) for lua, keys, args in calls], "EVALSHA")
    unknown = [n for n, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if unknown:
        again = [(calls[n][0].source, calls[n][1], calls[n][2]) for n in unknown]
        for n, reply in zip(unknown, _pipeline(client, again, "EVAL"), strict=True):
            replies[n] = reply
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _pipeline(client: Any, calls: list[tuple[str, list[str], list[Any]]], how: str) -> list[Any]:
    """``how`` (EVALSHA, EVAL) of each (script, keys, args) in ``calls``, pipelined: the
    replies, errors among them."""
    if not calls:
        return []
    pipe = client.pipeline(transaction=False)
    cluster = isinstance(client, RedisCluster)
    for text, keys, args in calls:
        options: dict[str, Any] = {NEVER_DECODE: True}
        if cluster and keys:  # (redis-py's cluster pipeline would ask COMMAND GETKEYS)
            options["target_nodes"] = client.get_node_from_key(keys[0])
        pipe.execute_command(how, text, len(keys), *keys, *args, **options)
    return list(pipe.execute(raise_on_error=False))
