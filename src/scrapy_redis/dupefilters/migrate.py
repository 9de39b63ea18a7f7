"""Move the fingerprints of an existing duplicate filter set into another filter.

A crawl that used the original's layout (``<spider>:dupefilter``, one set of hex
fingerprints) keeps its history when it switches DUPEFILTER_CLASS to a filter of
another layout: stop the workers (with SCHEDULER_PERSIST the queue is kept), copy
the fingerprints, switch the setting, start the workers again. Requests already
queued were recorded in the old set, so they are in the new filter too and no page
is fetched twice. From a Scrapy project's directory, with the NEW DUPEFILTER_CLASS
in its settings (or given with ``-s``)::

    python -m scrapy_redis.migrate_dupefilter SPIDER [--delete-source] [-s NAME=VALUE]

The source is ``--from KEY`` or, by default, SCHEDULER_DUPEFILTER_KEY formatted
for SPIDER. The copy reads the set in batches (SSCAN) and writes each batch in one
round trip; running it again copies nothing twice. The source is deleted only with
``--delete-source``. A filter whose own key is the source (the Bloom filter keeps
its layout in ``<spider>:dupefilter``) gets it out of the way first: the set is
renamed ``<source>:old`` (:func:`make_way`), and read from there.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from scrapy_redis.queues.seen_sets import BitFilter, SetFilter

logger = logging.getLogger(__name__)


@runtime_checkable
class BatchFilter(Protocol):
    """A filter that checks and records a batch of fingerprints in one call."""

    def seen_many(self, fingerprints: Sequence[str]) -> list[bool]: ...


def source_batches(server: Any, key: str, batch: int) -> Iterator[list[str]]:
    """The members of the set ``key``, as text, ``batch`` at a time (SSCAN)."""
    cursor = 0
    while True:
        cursor, members = server.sscan(key, cursor, count=batch)
        if members:
            yield [m.decode() if isinstance(m, bytes) else str(m) for m in members]
        if int(cursor) == 0:
            return


@runtime_checkable
class RecordingFilter(Protocol):
    """A filter that records a batch of fingerprints itself (keeping its own counts)."""

    def record_fingerprints(self, fingerprints: Sequence[str]) -> list[bool]: ...


def record_batch(server: Any, dupefilter: Any, fingerprints: list[str]) -> None:
    """Record ``fingerprints`` in ``dupefilter``, in one round trip."""
    if isinstance(dupefilter, RecordingFilter):
        dupefilter.record_fingerprints(fingerprints)
        return
    if isinstance(dupefilter, BatchFilter):
        dupefilter.seen_many(fingerprints)
        return
    if not isinstance(dupefilter, SetFilter):
        raise TypeError(
            f"DUPEFILTER_CLASS {type(dupefilter).__name__} cannot take fingerprints in "
            "batches (it has neither seen_members() nor seen_many())."
        )
    layout = dupefilter.seen_members(fingerprints)
    pipe = server.pipeline(transaction=False)
    for index, member in layout.members:
        pipe.sadd(layout.keys[index], member)
    pipe.execute()


def migrate(
    server: Any,
    source: str,
    dupefilter: Any,
    batch: int = 1000,
    progress: Callable[[int], None] = lambda copied: None,
) -> int:
    """Copy every fingerprint of the set ``source`` into ``dupefilter``; how many. A set
    in the filter's own key is renamed first (see :func:`make_way`)."""
    source = make_way(server, source, dupefilter)
    kind = server.type(source)
    kind = kind.decode() if isinstance(kind, bytes) else kind
    if kind not in ("set", "none"):
        raise ValueError(f"{source} holds a {kind}, not a set of fingerprints.")
    copied = 0
    for fingerprints in source_batches(server, source, batch):
        record_batch(server, dupefilter, fingerprints)
        copied += len(fingerprints)
        progress(copied)
    return copied


def writes_into(dupefilter: Any, key: str) -> bool:
    """Whether ``dupefilter`` records fingerprints in the set ``key`` (the same layout)."""
    if isinstance(dupefilter, BitFilter) or not isinstance(dupefilter, SetFilter):
        return False
    return key in dupefilter.seen_members(["0" * 40]).keys


def set_aside_key(source: str) -> str:
    """Where :func:`make_way` moves a source set that is in the new filter's way."""
    return f"{source}:old"


def make_way(server: Any, source: str, dupefilter: Any) -> str:
    """The key to read the fingerprints of ``source`` from: ``source`` itself, unless the
    filter keeps something else there (its ``meta_key``: the Bloom filter's layout):
    then the set is renamed to :func:`set_aside_key` (once; a copy run again reads it
    there)."""
    if getattr(dupefilter, "meta_key", None) != source or writes_into(dupefilter, source):
        return source
    aside = set_aside_key(source)
    kind = server.type(source)
    if kind in (b"set", "set"):
        if not server.renamenx(source, aside):
            raise ValueError(
                f"{source} is in the way of {type(dupefilter).__name__} and {aside}, where "
                "it would be moved, exists: copy that one first (--from), then delete it."
            )
        logger.warning("Moved %s to %s: the new filter uses %s.", source, aside, source)
    return aside if server.exists(aside) else source


def install_project_reactor(settings: Any) -> None:
    """Install the reactor the project's settings name (TWISTED_REACTOR), as ``scrapy``
    commands do: Scrapy's crawler, built here to build the filter, refuses to be set up
    without one ("We expected a Twisted reactor to be installed"; 2.13:
    "get_reactor_settings() called without an installed reactor"). None is run."""
    import sys

    from scrapy.utils.reactor import install_reactor

    if "twisted.internet.reactor" in sys.modules:
        return
    if reactor_path := settings.get("TWISTED_REACTOR"):
        install_reactor(reactor_path, settings.get("ASYNCIO_EVENT_LOOP"))
    else:
        from twisted.internet import reactor  # noqa: F401 - installs the default one


def _target(spider_name: str, settings: Any) -> Any:
    """The project's DUPEFILTER_CLASS, built as the scheduler builds it for SPIDER."""
    from scrapy import Spider
    from scrapy.utils.test import get_crawler  # a crawler set up as for a crawl, not run

    from scrapy_redis.dupefilters.settings import dupefilter_class_path
    from scrapy_redis.utils import load_configured

    spidercls = type("MigratedSpider", (Spider,), {"name": spider_name})
    install_project_reactor(settings)
    crawler = get_crawler(spidercls, settings.copy_to_dict())
    spider = crawler.spidercls.from_crawler(crawler)
    crawler.spider = spider
    return load_configured("DUPEFILTER_CLASS", dupefilter_class_path(settings)).from_spider(spider)


def project_settings(pairs: Sequence[str]) -> Any:
    """The Scrapy project's settings (run from its directory), with the command's
    ``-s NAME=VALUE`` ``pairs`` over them, as ``scrapy crawl -s`` does."""
    from scrapy.utils.project import get_project_settings

    settings = get_project_settings()
    for pair in pairs:
        name, _, value = pair.partition("=")
        settings.set(name, value, priority="cmdline")
    return settings


def main(argv: Sequence[str] | None = None) -> int:
    from scrapy_redis import defaults
    from scrapy_redis.connection import get_redis_from_settings
    from scrapy_redis.store.keys import format_key

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spider", help="the spider name (formats the key templates)")
    parser.add_argument("--from", dest="source", help="the set to copy (default: the spider's)")
    parser.add_argument("--delete-source", action="store_true")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("-s", dest="set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    settings = project_settings(args.set)
    template = settings.get("SCHEDULER_DUPEFILTER_KEY") or defaults.SCHEDULER_DUPEFILTER_KEY
    source = args.source or format_key(template, args.spider)
    dupefilter = _target(args.spider, settings)
    if args.delete_source and writes_into(dupefilter, source):
        raise SystemExit(f"Not deleting {source}: the new filter keeps its fingerprints there.")
    server = get_redis_from_settings(settings)
    read_from = make_way(server, source, dupefilter)
    copied = migrate(server, read_from, dupefilter, args.batch)
    print(f"Copied {copied} fingerprints from {read_from} into {type(dupefilter).__name__}.")
    if args.delete_source:
        server.unlink(read_from)
        print(f"Deleted {read_from}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
