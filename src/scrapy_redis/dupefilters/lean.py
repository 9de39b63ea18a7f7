"""LeanDupeFilter: exact duplicate filtering at about 5 bytes per request.

The same fingerprints as :class:`~scrapy_redis.dupefilter.RFPDupeFilter`, cut to
their top bits and kept as 32-bit integers in many small Redis sets that Redis
stores as intsets (see :mod:`scrapy_redis.dupefilters.lean_layout`). Its keys, derived from
the filter's key ``<key>`` (``<spider>:dupefilter`` under the scheduler):

* ``<key>:lean``: a hash with the layout (version, bucket bits, member bits, the
  capacity it was sized for) and ``count``, the fingerprints recorded. The first
  worker to open the filter stores its layout; every other worker, and every
  restart, uses the stored one whatever its own DUPEFILTER_LEAN_CAPACITY;
* ``<key>:lean:<bucket in hex>``: the buckets, created when first written.

Each write is one script call (``lean_seen_add.lua``) that records the
fingerprints, counts the new ones and is applied once even when sent again.
Past its capacity the filter goes on, exact as before, but buckets grow past
Redis's ``set-max-intset-entries`` and become hashtables: the log says so once,
and stats ``dupefilter/fill``, ``dupefilter/capacity`` and
``dupefilter/largest_bucket`` show it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from redis.exceptions import ResponseError
from scrapy import Request

from scrapy_redis import defaults
from scrapy_redis.connection import is_cluster
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.dupefilters.lean_expiry import LeanExpiry
from scrapy_redis.dupefilters.lean_layout import (
    DEFAULT_INTSET_ENTRIES,
    LeanLayout,
    layout_for,
    layout_from_meta,
)
from scrapy_redis.dupefilters.migrate import source_batches
from scrapy_redis.queues.seen_sets import SeenMembers
from scrapy_redis.store.keys import derived_pattern, lean_meta_key, slot_base
from scrapy_redis.store.scripts import script

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

logger = logging.getLogger(__name__)

_META_FIELDS = ("version", "bucket_bits", "member_bits", "capacity", "count")
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


class LeanDupeFilter(LeanExpiry, RFPDupeFilter):
    """An exact shared duplicate filter at ~5 bytes per request (see the module)."""

    #: The scheduler's push script checks and records the buckets (see seen_members()).
    checks_in_script: ClassVar[bool] = True
    #: Under the scheduler's push script, the fill is read (one HGET) every this many
    #: batches, for the stats and the warning past capacity.
    fill_check_every = 64
    _batches = 0
    #: Fingerprints the filter is sized for, when it creates its layout.
    capacity: int = defaults.DUPEFILTER_LEAN_CAPACITY
    #: Most fingerprints written by one script call of :meth:`record_fingerprints`.
    batch_size = 1000
    #: Redis's set-max-intset-entries (read at open; the default when CONFIG is refused).
    intset_entries: int = DEFAULT_INTSET_ENTRIES
    _layout: LeanLayout | None = None
    _warned: frozenset[str] = frozenset()

    def __init__(self, server: Any, key: str, debug: bool = False, **kwargs: Any) -> None:
        capacity = kwargs.pop("capacity", defaults.DUPEFILTER_LEAN_CAPACITY)
        super().__init__(server, key, debug, **kwargs)
        self.capacity = checked_capacity(capacity)

    @classmethod
    def _build(cls, crawler: Crawler, key: str, temporary: bool) -> Self:
        dupefilter = super()._build(crawler, key, temporary)
        dupefilter.capacity = checked_capacity(
            crawler.settings.getint("DUPEFILTER_LEAN_CAPACITY", defaults.DUPEFILTER_LEAN_CAPACITY)
        )
        if dupefilter.expiry is not None and not dupefilter.expiry.default_ms:
            raise ValueError(
                "LeanDupeFilter needs DUPEFILTER_LIFETIME in seconds, not inf (the longest "
                "lifetime: it cuts time into generations): set one, or use RFPDupeFilter."
            )
        return dupefilter

    def for_lane(self, key: str, lanes: int) -> Self:
        """A lane's filter, sized for its share of DUPEFILTER_LEAN_CAPACITY."""
        lane = super().for_lane(key, lanes)
        lane.capacity = checked_capacity(max(1, -(-self.capacity // lanes)))
        lane._layout, lane._warned, lane._batches = None, frozenset(), 0
        lane._generations, lane._clock, lane._parts_view = None, None, None
        return lane

    # -- layout ------------------------------------------------------------------------

    @property
    def meta_key(self) -> str:
        """The hash holding the layout and the count (``<key>:lean``)."""
        return lean_meta_key(self.key, is_cluster(self.server))

    @property
    def bucket_base(self) -> str:
        """What the bucket keys start with: the key (on a Redis Cluster in its slot,
        with the meta hash: ``{<key>}``, see keys.slot_base())."""
        return slot_base(self.key, is_cluster(self.server))

    @property
    def layout(self) -> LeanLayout:
        """The layout of the data (stored by the first worker; read once)."""
        if self._layout is None:
            self._layout = self._open_layout()
        return self._layout

    def open(self) -> None:
        """Read (or store) the layout; called by Scrapy's scheduler, else on first use."""
        self._layout = self._open_layout()

    def _open_layout(self) -> LeanLayout:
        if not self.temporary and self.server.exists(self.key):
            self._warn_once(
                "original",
                "%(key)s holds fingerprints of another duplicate filter, which "
                "LeanDupeFilter does not read: requests seen before may be crawled again "
                "(see LeanDupeFilter.import_set()).",
                {"key": self.key},
            )
        self.intset_entries = read_intset_entries(self.server)
        wanted = layout_for(self.capacity, self.intset_entries)
        meta = wanted.as_meta()
        reply = script("lean_open")(self.server, [self.meta_key], list(meta.values()))
        stored = dict(zip(_META_FIELDS, reply, strict=True))
        layout = layout_from_meta(stored, self.meta_key)
        if layout.capacity != self.capacity:
            self._warn_once(
                "layout",
                "DUPEFILTER_LEAN_CAPACITY is %(setting)d but the filter at %(key)s was "
                "created for %(capacity)d fingerprints (%(buckets)d buckets): using its "
                "layout. A new capacity applies to a new (cleared) filter only.",
                {
                    "setting": self.capacity,
                    "key": self.meta_key,
                    "capacity": layout.capacity,
                    "buckets": layout.buckets,
                },
            )
        if self.stats is not None:
            self.stats.set_value("dupefilter/capacity", layout.capacity)
        self._watch_fill(layout, int(stored["count"] or 0), 0)
        return layout

    # -- recording ---------------------------------------------------------------------

    def request_seen(self, request: Request) -> bool:
        """Record the fingerprint of ``request``; True if it was already there. One
        script call, applied once even if redis-py sends it again."""
        writes = self.writes
        fingerprint = self.request_fingerprint(request)
        if self.expiry is not None:
            return self.seen_expiring([fingerprint], [self.expiry.lifetime_ms(request)])[0]
        layout = self.layout
        bucket, member = layout.locate(fingerprint)
        keys = [self.meta_key, writes.key(self.key), layout.bucket_key(self.bucket_base, bucket)]
        args = [writes.ttl_ms, writes.take_for(fingerprint), 1, member]
        flags, count, largest = script("lean_seen_add")(self.server, keys, args)
        writes.confirmed()
        self._watch_fill(layout, int(count), int(largest))
        return bool(flags == b"0")

    def record_fingerprints(self, fingerprints: Sequence[str]) -> list[bool]:
        """Record ``fingerprints`` (hex, as :meth:`request_fingerprint` gives them), in
        script calls of :attr:`batch_size`; for each, whether it was new."""
        new: list[bool] = []
        for start in range(0, len(fingerprints), self.batch_size):
            batch = fingerprints[start : start + self.batch_size]
            new.extend(self._record(batch, self.writes.take()))
        return new

    def import_set(self, source_key: str) -> int:
        """Record every fingerprint of the set ``source_key`` (the default filter's
        ``<spider>:dupefilter``: hex fingerprints), read with SSCAN; the set is left as it
        is. How many were new. Run it while no worker uses this filter."""
        batches = source_batches(self.server, source_key, self.batch_size)
        return sum(sum(self.record_fingerprints(batch)) for batch in batches)

    def _record(self, fingerprints: Sequence[str], number: int) -> list[bool]:
        layout = self.layout
        seen = self.seen_members(fingerprints)
        args: list[Any] = [self.writes.ttl_ms, number]
        for index, member in seen.members:
            args += (index + 1, member)
        keys = [self.meta_key, self.writes.key(self.key), *seen.keys]
        flags, count, largest = script("lean_seen_add")(self.server, keys, args)
        self._watch_fill(layout, int(count), int(largest))
        return [flag == ord("1") for flag in flags]

    def seen_members(self, fingerprints: Sequence[str]) -> SeenMembers:
        """Where ``fingerprints`` are recorded: for each, its bucket (an index into the
        distinct bucket keys of the batch) and its integer member (see
        :mod:`scrapy_redis.queues.seen_sets`); the script counts what it adds in the meta hash.
        Reads the layout once, if not read yet, and the fill every
        :attr:`fill_check_every` batches (the warning past capacity)."""
        layout = self.layout
        index_of: dict[int, int] = {}  # the batch's buckets, in order of first use
        members: list[tuple[int, str | int]] = [
            (index_of.setdefault(bucket, len(index_of)), member)
            for bucket, member in layout.locate_many(fingerprints)
        ]
        keys = layout.keys_of(self.bucket_base, index_of)
        self._batches += 1
        if self._batches % self.fill_check_every == 1:
            self._watch_fill(layout, self.count(), 0)
        return SeenMembers(self.key, keys, members, counter=self.meta_key)

    # -- what users ask for ------------------------------------------------------------

    def key_types(self) -> list[tuple[str, str]]:
        """The meta hash (the buckets are many: the push script checks none of them)."""
        return [(self.meta_key, "hash")]

    def count(self) -> int:
        """How many fingerprints are recorded (exact: kept by every write and forget)."""
        return int(self.server.hget(self.meta_key, "count") or 0)

    def forget(self, request_or_url: Request | str) -> bool:
        """Forget a request (or a URL, as a GET request) so that it can be scheduled
        again; whether it was recorded."""
        request = Request(request_or_url) if isinstance(request_or_url, str) else request_or_url
        return self.forget_fingerprint(self.request_fingerprint(request))

    def forget_fingerprints(self, fingerprints: Sequence[str]) -> list[bool]:
        """Forget ``fingerprints`` (see :meth:`forget`); for each, whether it was recorded."""
        return [self.forget_fingerprint(fingerprint) for fingerprint in fingerprints]

    def forget_fingerprint(self, fingerprint: str) -> bool:
        """Forget one fingerprint (see :meth:`forget`); whether it was recorded."""
        layout = self.layout
        bucket, member = layout.locate(fingerprint)
        keys = [self.meta_key, layout.bucket_key(self.bucket_base, bucket)]
        keys += self.generation_keys_of(fingerprint)  # those that expire (DUPEFILTER_LIFETIME)
        return bool(script("lean_forget")(self.server, keys, [member]))

    def clear(self) -> None:
        """Delete every fingerprint: the buckets (by name, from the stored layout; by a
        SCAN of ``<key>:lean:*`` if the layout is lost), then the meta hash. The next
        use stores a layout again."""
        for chunk in _chunks(self._bucket_keys_to_clear(), 1000):
            self.server.unlink(*chunk)
        pattern = derived_pattern(self.key, "lean:g", is_cluster(self.server))
        for chunk in _chunks(self.server.scan_iter(match=pattern, count=1000), 1000):
            self.server.unlink(*chunk)  # the generations of fingerprints that expire
        self.server.unlink(self.meta_key)
        self._layout, self._generations, self._parts_view = None, None, None

    def _bucket_keys_to_clear(self) -> Iterator[str]:
        try:
            meta = {
                _text(name): value for name, value in self.server.hgetall(self.meta_key).items()
            }
            layout = layout_from_meta(meta, self.meta_key)
        except ValueError:
            pattern = _GLOB_SPECIAL.sub(r"\\\1", self.key) + ":lean:*"
            return (_text(key) for key in self.server.scan_iter(match=pattern, count=1000))
        return iter(layout.bucket_keys(self.bucket_base))

    # -- saying so ---------------------------------------------------------------------

    def _watch_fill(self, layout: LeanLayout, count: int, largest: int) -> None:
        """Stats of the fill; a warning (once) past capacity and once a bucket is too
        full to stay an intset."""
        if self.stats is not None:
            self.stats.set_value("dupefilter/fill", count)
            self.stats.max_value("dupefilter/largest_bucket", largest)
        if count > layout.capacity:
            self._warn_once(
                "capacity",
                "The lean duplicate filter %(key)s holds %(count)d fingerprints, past the "
                "capacity of %(capacity)d it was created for: about %(collisions).2g new "
                "requests may now be taken for duplicates, and its buckets will soon pass "
                "Redis's set-max-intset-entries and become hashtables (~10x the memory). "
                "Raise set-max-intset-entries on the server now (e.g. to 2048), and give "
                "the next crawl a larger DUPEFILTER_LEAN_CAPACITY (see the docs: "
                "Duplicate filters at scale).",
                {
                    "key": self.meta_key,
                    "count": count,
                    "capacity": layout.capacity,
                    "collisions": layout.expected_collisions(count),
                },
            )
        if largest > self.intset_entries:
            self._warn_once(
                "intset",
                "A bucket of the lean duplicate filter %(key)s holds %(largest)d members, "
                "over Redis's set-max-intset-entries (%(limit)d): Redis keeps it as a "
                "hashtable from now on, at ~10x the memory per fingerprint. Raise "
                "set-max-intset-entries on the server (e.g. to 2048) to keep the others "
                "intsets.",
                {"key": self.meta_key, "largest": largest, "limit": self.intset_entries},
            )

    def _warn_once(self, what: str, message: str, args: dict[str, Any]) -> None:
        if what not in self._warned:
            self._warned = self._warned | {what}
            logger.warning(message, args)


def checked_capacity(value: Any) -> int:
    """DUPEFILTER_LEAN_CAPACITY as a positive int, or a ValueError naming it."""
    try:
        capacity = int(value)
    except (TypeError, ValueError):
        capacity = 0
    if capacity < 1:
        raise ValueError(
            f"DUPEFILTER_LEAN_CAPACITY must be a positive number of fingerprints, not "
            f"{value!r}: set it to the number of requests the crawl may see (e.g. 10000000)."
        )
    return capacity


def read_intset_entries(server: Any) -> int:
    """Redis's ``set-max-intset-entries``; the default (512) if CONFIG is refused."""
    try:
        config = server.config_get("set-max-intset-entries")
        return max(1, int(next(iter(config.values()))))
    except (ResponseError, StopIteration, TypeError, ValueError):
        return DEFAULT_INTSET_ENTRIES


def _chunks(keys: Iterator[str] | Any, size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for key in keys:
        chunk.append(key)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _text(key: bytes | str) -> str:
    return key.decode() if isinstance(key, bytes) else key
