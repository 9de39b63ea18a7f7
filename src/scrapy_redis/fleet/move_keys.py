"""The keys a move copies whole (see move_crawl.py): the ones that keep their names (the
start key, the items list, the stats hash) and the recurring start messages' keys, named
as each server names them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scrapy_redis import defaults
from scrapy_redis.connection import is_cluster
from scrapy_redis.exceptions import ScrapyRedisError
from scrapy_redis.fleet.crawl_keys import start_keys_of
from scrapy_redis.fleet.status import spider_loader
from scrapy_redis.store.keys import format_key, recurring_every_key, recurring_key


class MoveRefusedError(ScrapyRedisError):
    """The crawl cannot be moved now (the message says why and what to do)."""


def named_keys(spider_name: str, settings: Any) -> list[str]:
    """The keys that keep their names: the start keys (first), items list, stats hash."""
    templates = [
        settings.get("REDIS_ITEMS_KEY") or defaults.PIPELINE_KEY,
        settings.get("STATS_KEY") or defaults.STATS_KEY,
    ]
    others = [format_key(template, spider_name) for template in templates]
    return [*start_keys(spider_name, settings), *others]


def start_keys(spider_name: str, settings: Any) -> list[str]:
    """The start keys of the project's spider ``spider_name`` (its own ``redis_key``, as
    the workers, ``push`` and ``status`` read them); REDIS_START_URLS_KEY's if the project
    has no such spider."""
    try:
        spidercls = spider_loader(settings).load(spider_name)
    except KeyError:
        spidercls = None
    found = start_keys_of(settings, spidercls) if spidercls is not None else ()
    template = settings.get("REDIS_START_URLS_KEY") or defaults.START_URLS_KEY
    return list(found) or [format_key(template, spider_name)]


def check_named_keys(source: Any, target: Any, keys: Sequence[str], force: bool) -> None:
    """:class:`MoveRefusedError` if one of ``keys`` the source has exists on the target
    (unless ``force``): checked before anything is moved."""
    check_renamed_keys(source, target, [(key, key) for key in keys], force)


def copy_named_keys(source: Any, target: Any, keys: Sequence[str], force: bool) -> list[str]:
    """DUMP and RESTORE ``keys`` that exist (they keep their names); the copied ones."""
    return [new for _, new in copy_renamed_keys(source, target, [(k, k) for k in keys], force)]


def recurring_keys(source: Any, target: Any, start_key: str) -> list[tuple[str, str]]:
    """The recurring start messages' keys of ``start_key``: (source name, target name),
    each named as its server names it (a Redis Cluster hash-tags the start key)."""
    on_source, on_target = is_cluster(source.server), is_cluster(target.server)
    return [
        (name(start_key, on_source), name(start_key, on_target))
        for name in (recurring_key, recurring_every_key)
    ]


def check_renamed_keys(
    source: Any, target: Any, pairs: Sequence[tuple[str, str]], force: bool
) -> None:
    """As :func:`check_named_keys`, for keys named differently on the target."""
    for old, new in pairs:
        if not force and source.server.exists(old) and target.server.exists(new):
            raise MoveRefusedError(f"{new} exists on the target: --force replaces it.")


def copy_renamed_keys(
    source: Any, target: Any, pairs: Sequence[tuple[str, str]], force: bool
) -> list[tuple[str, str]]:
    """DUMP each source key of ``pairs`` that exists and RESTORE it as its target name;
    the pairs copied."""
    copied = []
    for old, new in pairs:
        dump = source.server.dump(old)
        if dump is None:
            continue
        check_renamed_keys(source, target, [(old, new)], force)  # (one written meanwhile)
        target.server.restore(new, 0, dump, replace=True)
        copied.append((old, new))
    return copied
