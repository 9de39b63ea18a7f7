"""Fingerprints that expire in the lean filter (DUPEFILTER_LIFETIME): generations of buckets.

A fingerprint that expires is recorded in its bucket of the *generation* in which it
expires: time is cut into windows of ``span`` = DUPEFILTER_LIFETIME / :data:`GENERATIONS`
ms (by the Redis server's clock), and a fingerprint of lifetime ``L`` recorded at ``t``
goes to the window holding ``t + L``, rounded up: it lives at least ``L`` and at most one
span more. A generation's buckets are intsets like the filter's own, named
``<key>:lean:g<generation>.<part>:<bucket>``, and expire whole when their window ends
(Redis frees them itself: nothing to sweep). A fingerprint kept forever (``meta`` lifetime
``None`` or 0) goes to the filter's own buckets, so a filter that had no lifetime keeps
its fingerprints forever when one is set. A request is seen if its fingerprint is in its
own bucket or in its bucket of one of the ``GENERATIONS + 1`` live generations (one script
call per batch: ``lua/_lean_expiry.lua``). A lifetime longer than DUPEFILTER_LIFETIME is
cut to it.

A generation is sized for what it holds in a steady crawl at capacity: its share of the
capacity (1 / GENERATIONS), in as many buckets as keep them a few hundred full, with room
to spare (:func:`generation_size`; any number, not a power of two: the fingerprint's top
32 bits choose). Each bucket key costs ~170 bytes besides its members, and the
``GENERATIONS + 1`` live generations each have their buckets: fewer, fuller buckets are
what keeps the bytes per live URL near the filter's own. A generation that receives more
(a crawl that finds most of its URLs within one window) grows by *parts*, each of the
same buckets: once it counts a part's capacity of fingerprints (field ``g<generation>``
of the meta hash), the next batches write to its next part, and every part is asked, so
buckets stay intsets whatever comes. The lifetime and the generations' size are stored
with the filter (its meta hash's ``lifetime_ms``, ``gen_buckets``, ``gen_part``, set by
the first worker): every worker cuts time and generations the same way.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy_redis.dupefilters.lean_layout import LeanLayout, target_fill
from scrapy_redis.queues.base import batch_arg
from scrapy_redis.queues.seen_sets import SeenExpiring
from scrapy_redis.store.keys import lean_generation_key
from scrapy_redis.store.scripts import script

if TYPE_CHECKING:
    from scrapy_redis.queues.base import Candidate

logger = logging.getLogger(__name__)

#: Generations per lifetime: a fingerprint lives at most 1/GENERATIONS longer than asked,
#: and memory holds those past their lifetime (1/(2 GENERATIONS) of the live ones on
#: average). Each live generation is asked about each request: 3 cost a lookup more than
#: 2 and ~0.4 byte less per live URL (docs/incremental.rst).
GENERATIONS = 3
#: Most fingerprints one write adds to a generation past its part's capacity (the batch
#: that fills a part is written to it whole): :meth:`LeanExpiry.seen_expiring` sends no more
#: at once, the scheduler's batches are smaller (SCHEDULER_ENQUEUE_BATCH_SIZE, 100 by default).
BATCH_ROOM = 1000
#: Seconds between two readings of the server's clock (its offset from this one's).
CLOCK_EVERY = 60.0
#: How often a batch is sent again while its generations are found stale.
_STALE_TRIES = 8
#: Most buckets whose generation keys are kept made (for the current generations only).
_KEYS_CACHED = 1 << 14


@dataclass(frozen=True)
class Generations:
    """How a lean filter cuts time (the longest lifetime) and sizes its generations (the
    buckets of a part, the fingerprints a part holds)."""

    lifetime_ms: int
    layout: LeanLayout
    buckets: int
    part_capacity: int
    _cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def span_ms(self) -> int:
        return -(-self.lifetime_ms // GENERATIONS)

    def parts_of(self, held: int) -> int:
        """The parts of a generation that counts ``held`` fingerprints."""
        return max(0, held) // self.part_capacity + 1

    def key(self, base: str, generation: int, part: int, bucket: int) -> str:
        return lean_generation_key(base, generation, part, bucket, self.buckets)

    def keys(self, base: str, bucket: int, parts: dict[int, int]) -> list[str]:
        """``bucket``'s keys in each part of the generations ``parts`` ({generation: its
        parts}: a forget looks in each that may be live)."""
        return [self.key(base, k, j, bucket) for k, n in parts.items() for j in range(n)]

    def live_keys(
        self, base: str, buckets: Iterable[int], live: int, parts: tuple[int, ...]
    ) -> list[str]:
        """For each of ``buckets``, its keys of the live generations ``live .. live +
        GENERATIONS``, each of its ``parts`` (made once per bucket and generation: a
        batch's buckets were mostly met before)."""
        cache = self._cache
        if cache.get(-1) != (base, live, parts) or len(cache) > _KEYS_CACHED:
            cache.clear()
            cache[-1] = (base, live, parts)
        keys = list[str]()
        for bucket in buckets:
            names = cache.get(bucket)
            if names is None:
                live_parts = dict(zip(range(live, live + GENERATIONS + 1), parts, strict=True))
                names = cache[bucket] = self.keys(base, bucket, live_parts)
            keys += names
        return keys


def generation_size(layout: LeanLayout, intset_entries: int) -> tuple[int, int]:
    """The buckets of a generation's part and the fingerprints it holds, for a filter of
    ``layout``: its share of the capacity in buckets of :func:`steady_fill` (no more than
    the filter's); a part holds up to :func:`part_fill` a bucket on average (the room a
    steady crawl at capacity needs to stay in one part), less :data:`BATCH_ROOM` (the
    batch that fills a part is written to it whole)."""
    share = layout.capacity / GENERATIONS
    buckets = min(layout.buckets, max(1, math.ceil(share / steady_fill(intset_entries))))
    held = buckets * part_fill(buckets, intset_entries)
    return buckets, max(held // 2, held - BATCH_ROOM)


def steady_fill(intset_entries: int) -> int:
    """The fill of a generation's buckets in a steady crawl at capacity: at most the
    filter's own (:func:`~scrapy_redis.dupefilters.lean_layout.target_fill`), and such
    that an intset one standard deviation fuller (8 + 4·(f + √f) bytes) still fits the
    allocator's size class below (jemalloc's: four a doubling), not the next one up: at
    the default limit, 362 members (1,536-byte intsets) rather than 393 (mostly 1,792)."""
    fill = target_fill(intset_entries)
    size = 8 + 4 * (fill + math.sqrt(fill))
    step = 2 ** max(3, math.floor(math.log2(max(size - 1, 1))) - 2)
    room = (math.floor(size / step) * step - 8) / 4  # f + √f within the class below
    root = (-1 + math.sqrt(1 + 4 * room)) / 2
    return max(1, min(fill, int(root * root)))


def part_fill(buckets: int, intset_entries: int) -> int:
    """The largest average fill f of ``buckets`` buckets whose fullest (Poisson fills:
    f + (√(2 ln buckets) + 1)·√f) stays within ``intset_entries``; at least the filter's
    own target fill (the fullest of up to 2^28 buckets within it)."""
    spread = math.sqrt(2 * math.log(max(buckets, 1))) + 1
    root = (-spread + math.sqrt(spread * spread + 4 * max(intset_entries, 1))) / 2
    return max(target_fill(intset_entries), int(root * root))


class ServerClock:
    """The Redis server's clock, estimated from this one's and an offset read with TIME."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self._offset_ms = 0.0
        self._read_at = -CLOCK_EVERY

    def read_again(self) -> None:
        """Read the server's clock at the next :meth:`now_ms` (the estimate was off)."""
        self._read_at = -CLOCK_EVERY

    def now_ms(self) -> int:
        local = time.monotonic()
        if local - self._read_at >= CLOCK_EVERY:
            seconds, micros = self.server.time()
            self._offset_ms = seconds * 1000 + micros / 1000 - time.time() * 1000
            self._read_at = local
        return int(time.time() * 1000 + self._offset_ms)


class LeanExpiry:
    """LeanDupeFilter's part for fingerprints that expire (see the module)."""

    key: str
    server: Any
    writes: Any
    layout: LeanLayout
    intset_entries: int
    bucket_base: str
    meta_key: str
    expiry: Any
    _generations: Generations | None = None
    _clock: ServerClock | None = None
    #: (live generation, the parts of the live generations) as last read.
    _parts_view: tuple[int, tuple[int, ...]] | None = None
    #: Whether the own buckets may hold members (read with the generations).
    _asks_own = True

    @property
    def generations(self) -> Generations:
        """The generations (the lifetime and size stored with the filter; read once)."""
        if self._generations is None:
            self._generations = self._open_generations()
        return self._generations

    def _open_generations(self) -> Generations:
        ours = self.expiry.default_ms or 0
        buckets, part = generation_size(self.layout, self.intset_entries)
        opened = script("lean_lifetime_open")(self.server, [self.meta_key], [ours, buckets, part])
        stored, own, buckets, part, earlier = (_stored_int(value) for value in opened)
        if stored <= 0 or buckets <= 0 or part <= 0:
            raise ValueError(
                f"The lean filter at {self.meta_key!r} needs a DUPEFILTER_LIFETIME in "
                "seconds (not inf) to cut time into generations, and positive 'gen_buckets' "
                "and 'gen_part': set one, or use RFPDupeFilter (or delete those fields)."
            )
        self._asks_own = bool(own)
        if stored != ours:
            logger.warning(
                "DUPEFILTER_LIFETIME is %(ours)s ms but the lean filter %(key)s was "
                "created with %(stored)s ms: using the filter's.",
                {"ours": ours, "key": self.meta_key, "stored": stored},
            )
        if earlier:
            logger.warning(
                "The lean filter %(key)s held generations of an earlier layout (before "
                "scrapy-redis 1.0.0): they are not read any more and expire on their own, "
                "so URLs recorded in them within the last lifetime may be crawled once more.",
                {"key": self.meta_key},
            )
        return Generations(stored, self.layout, min(buckets, self.layout.buckets), part)

    def generation_keys_of(self, fingerprint: str) -> list[str]:
        """The keys of ``fingerprint``'s bucket in every part of every generation that may
        be live now (a forget, see lean.py): none if no lifetime is stored with the filter
        (whatever this process's DUPEFILTER_LIFETIME: ``scrapy redis forget`` may run
        without it)."""
        meta = {_text(k): v for k, v in self.server.hgetall(self.meta_key).items()}
        stored, buckets, part = (_stored_int(meta.get(f)) for f in _SIZE_FIELDS)
        if stored <= 0 or buckets <= 0 or part <= 0:
            return []
        generations = Generations(stored, self.layout, min(buckets, self.layout.buckets), part)
        if self._clock is None:
            self._clock = ServerClock(self.server)
        k0 = self._clock.now_ms() // generations.span_ms  # (live: k0 + 1 .. k0 + G + 1)
        parts = {
            k: generations.parts_of(_stored_int(meta.get(f"g{k}")))
            for k in range(k0, k0 + GENERATIONS + 3)
        }
        bucket = self.layout.locate_parts([fingerprint], generations.buckets)[0][2]
        return generations.keys(self.bucket_base, bucket, parts)

    def expiry_stale(self) -> None:
        """A script found the batch's generations or buckets stale: read the server's
        clock, whether the own buckets are asked, and the generations' parts again, for
        the next batch."""
        if self._clock is not None:
            self._clock.read_again()
        self._generations, self._parts_view = None, None

    def expiring_members(self, candidates: Sequence[Candidate]) -> SeenExpiring:
        """The push script's part for ``candidates`` (``lua/_lean_expiry.lua``)."""
        fingerprints: list[str] = []
        lifetimes: list[int] = []
        for candidate in candidates:
            if candidate.fingerprint is not None:
                fingerprints.append(candidate.fingerprint)
                lifetimes.append(candidate.lifetime_ms)
        keys, members, config = self._located(fingerprints, lifetimes)
        every = batch_arg([c.lifetime_ms for c in candidates])
        return SeenExpiring(self.key, keys, ["lean_expire", every, config], members)

    def seen_expiring(self, fingerprints: Sequence[str], lifetimes: Sequence[int]) -> list[bool]:
        """Record ``fingerprints`` (``lifetimes`` in ms, 0 = forever), in script calls of at
        most :data:`BATCH_ROOM`, each applied once (sent again while it finds its
        generations stale); for each, whether it was seen (alive)."""
        seen: list[bool] = []
        for at in range(0, len(fingerprints), BATCH_ROOM):
            end = at + BATCH_ROOM
            seen += self._seen_expiring(fingerprints[at:end], lifetimes[at:end])
        return seen

    def _seen_expiring(self, fingerprints: Sequence[str], lifetimes: Sequence[int]) -> list[bool]:
        writes = self.writes
        number = writes.take_for((*fingerprints, *lifetimes))
        for _ in range(_STALE_TRIES):
            keys, members, config = self._located(fingerprints, lifetimes)
            args = [writes.ttl_ms, number, batch_arg(members), batch_arg(list(lifetimes)), config]
            flags = script("lean_expire_add")(self.server, [writes.key(self.key), *keys], args)
            if flags != b"stale":
                writes.confirmed()
                return [flag == ord("0") for flag in flags]
            self.expiry_stale()
        raise RuntimeError(f"The lean filter {self.meta_key} keeps finding its clock off.")

    def _live_parts(self, live: int) -> tuple[int, ...]:
        """The parts of the live generations ``live .. live + GENERATIONS``, from their
        counts in the meta hash (read once a window, and again when found stale)."""
        view = self._parts_view
        if view is None or view[0] != live:
            fields = [f"g{k}" for k in range(live, live + GENERATIONS + 1)]
            held = self.server.hmget(self.meta_key, fields)
            for name, count in zip(fields, held, strict=True):
                if count is not None and not _is_count(count):
                    logger.warning(
                        "The lean filter's meta hash %(key)s has %(field)s = %(value)r, not "
                        "a count: taken for 0 (that generation is not asked) until the next "
                        "write replaces it.",
                        {"key": self.meta_key, "field": name, "value": count[:40]},
                    )
            parts = tuple(self.generations.parts_of(_stored_int(count)) for count in held)
            view = self._parts_view = (live, parts)
        return view[1]

    def _located(
        self, fingerprints: Sequence[str], lifetimes: Sequence[int]
    ) -> tuple[list[str], list[Any], bytes]:
        """The batch's keys, members and config for ``lua/_lean_expiry.lua``: the buckets
        located once, the live generations from the server's clock and their parts, and
        the own buckets if they may hold members or one is kept forever."""
        layout, generations = self.layout, self.generations
        if self._clock is None:
            self._clock = ServerClock(self.server)
        live = self._clock.now_ms() // generations.span_ms + 1
        parts = self._live_parts(live)
        own = self._asks_own or any(lifetime <= 0 for lifetime in lifetimes)
        gen_index: dict[int, int] = {}
        own_index: dict[int, int] = {}
        members: list[Any] = []
        for bucket, member, gen in layout.locate_parts(fingerprints, generations.buckets):
            found = [gen_index.setdefault(gen, len(gen_index)) + 1, member]
            if own:
                found.append(own_index.setdefault(bucket, len(own_index)) + 1)
            members.append(found)
        keys = [self.meta_key, *layout.keys_of(self.bucket_base, own_index)]
        keys += generations.live_keys(self.bucket_base, gen_index, live, parts)
        span, longest, cap = generations.span_ms, generations.lifetime_ms, generations.part_capacity
        config: list[Any] = [live, span, longest, int(own), len(own_index), len(gen_index)]
        config += [GENERATIONS, list(parts), cap]
        return keys, members, batch_arg(config)


#: The meta hash's fields of the generations' size: the longest lifetime, the buckets of a
#: part, a part's capacity.
_SIZE_FIELDS = ("lifetime_ms", "gen_buckets", "gen_part")


def _stored_int(value: Any) -> int:
    """An integer read from the meta hash (untrusted): 0 if missing or not one."""
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _is_count(value: bytes) -> bool:
    return value.isdigit() and len(value) < 16


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
