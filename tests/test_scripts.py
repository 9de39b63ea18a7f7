"""The Lua scripts' sources: includes expanded once each, every script loadable."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from scrapy_redis.store import scripts

SCRIPTS = sorted(
    path.name.removesuffix(".lua")
    for path in resources.files("scrapy_redis.store.lua").iterdir()
    if path.name.endswith(".lua") and not path.name.startswith("_")
)


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_is_expanded_with_each_helper_once(name):
    source = scripts.source(name)
    assert "--#include" not in source
    defined = re.findall(r"^local function (\w+)", source, re.MULTILINE)
    assert len(defined) == len(set(defined)), defined


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_loads_on_the_server(server, name):
    assert server.script_load(scripts.source(name)) == scripts.script(name).sha


def test_includes_are_expanded_once_even_in_cycles():
    files = {
        "main.lua": "--#include _a.lua\n--#include _b.lua\nmain",
        "_a.lua": "--#include _b.lua\na",
        "_b.lua": "--#include _a.lua\nb",
    }
    lines = scripts.source("main", read=files.__getitem__).splitlines()
    assert [line for line in lines if not line.startswith("--")] == ["b", "a", "main"]


def test_a_script_the_server_lost_is_sent_whole_and_cached_again(server):
    """A restarted server, a promoted replica or SCRIPT FLUSH: EVALSHA answers NOSCRIPT,
    and the call is made with EVAL, which caches the script again."""
    replace = scripts.script("stats_replace")
    replace(server, ["demo:stats"], ["a", "1"])
    server.script_flush()
    assert server.script_exists(replace.sha) == [False]
    assert replace(server, ["demo:stats"], ["b", "2"]) == 1
    assert server.hgetall("demo:stats") == {b"b": b"2"}
    assert server.script_exists(replace.sha) == [True]
