"""Fingerprints that expire in the lean filter (DUPEFILTER_LIFETIME): generations of buckets.

A fingerprint that expires is recorded in its bucket of the *generation* in which it
expires: time is cut into windows of ``span`` = DUPEFILTER_LIFETIME / :data:`GENERATIONS`
ms (by the Redis server's clock), and a fingerprint of lifetime ``L`` recorded at ``t``
goes to the window holding ``t + L``, rounded up: it lives at least ``L`` and at most one
span more. A generation's buckets are intsets like the filter's own, named
``<key>:lean:g<generation>:<bucket>``, and expire whole when their window ends (Redis
frees them itself: nothing to sweep). A fingerprint kept forever (``meta`` lifetime
``None`` or 0) goes to the filter's own buckets, so a filter that had no lifetime keeps
its fingerprints forever when one is set. A request is seen if its fingerprint is in its
own bucket or in its bucket of one of the ``GENERATIONS + 1`` live generations (one script
call per batch: ``lua/_lean_expiry.lua``). A lifetime longer than DUPEFILTER_LIFETIME is
cut to it.

Each generation has as many buckets as the filter's own (the same bits of the fingerprint:
the same collisions), so that one generation holds the filter's whole capacity as intsets
(a crawl that finds most of its URLs within one span). The cost: each live generation's
buckets have their own per-key overhead, so a steady crawl, whose fingerprints spread over
the ``GENERATIONS + 1`` live generations, costs more per fingerprint than one burst (see
docs/incremental.rst for the numbers). The lifetime is stored with the filter (its meta
hash's ``lifetime_ms``, set by the first worker): every worker cuts time the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy_redis.dupefilters.lean_layout import LeanLayout
from scrapy_redis.queues.base import batch_arg
from scrapy_redis.queues.seen_sets import SeenExpiring
from scrapy_redis.store.keys import lean_generation_key
from scrapy_redis.store.scripts import script

if TYPE_CHECKING:
    from scrapy_redis.queues.base import Candidate

logger = logging.getLogger(__name__)

#: Generations per lifetime: a fingerprint lives at most 1/GENERATIONS longer than asked.
#: More would be more exact and cost more memory (each live generation has its buckets).
GENERATIONS = 2
#: Seconds between two readings of the server's clock (its offset from this one's).
CLOCK_EVERY = 60.0
#: How often a batch is sent again while its generations are found stale.
_STALE_TRIES = 8
#: Most buckets whose generation keys are kept made (for the current generations only).
_KEYS_CACHED = 1 << 14


@dataclass(frozen=True)
class Generations:
    """How a lean filter cuts time: the longest lifetime and the generations' buckets."""

    lifetime_ms: int
    layout: LeanLayout
    _cache: dict[int, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def span_ms(self) -> int:
        return -(-self.lifetime_ms // GENERATIONS)

    def keys(self, base: str, buckets: Sequence[int], k0: int) -> list[str]:
        """For each of ``buckets``, its keys of generations ``k0 .. k0 + GENERATIONS + 2``
        (around the live ones: a forget looks in each that may be live)."""
        bits = self.layout.bucket_bits
        return [
            lean_generation_key(base, k, bucket, bits)
            for bucket in buckets
            for k in range(k0, k0 + GENERATIONS + 3)
        ]

    def live_keys(self, base: str, buckets: Iterable[int], live: int) -> list[str]:
        """For each of ``buckets``, its keys of the live generations ``live .. live +
        GENERATIONS`` (made once per bucket and generation: a batch's buckets were mostly
        met before)."""
        cache = self._cache
        if cache.get(-1) != (base, live) or len(cache) > _KEYS_CACHED:
            cache.clear()
            cache[-1] = (base, live)
        bits, keys = self.layout.bucket_bits, list[str]()
        for bucket in buckets:
            names = cache.get(bucket)
            if names is None:
                ks = range(live, live + GENERATIONS + 1)
                names = cache[bucket] = [lean_generation_key(base, k, bucket, bits) for k in ks]
            keys += names
        return keys


def generations_for(layout: LeanLayout, lifetime_ms: int) -> Generations:
    """The generations of a filter of ``layout`` whose longest lifetime is ``lifetime_ms``:
    as many buckets each as the filter's own, so that a generation may hold the filter's
    whole capacity (a crawl that finds its URLs at once) as intsets."""
    return Generations(lifetime_ms, layout)


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
    bucket_base: str
    meta_key: str
    expiry: Any
    _generations: Generations | None = None
    _clock: ServerClock | None = None
    #: Whether the own buckets may hold members (read with the generations).
    _asks_own = True

    @property
    def generations(self) -> Generations:
        """The generations (the lifetime stored with the filter; read once)."""
        if self._generations is None:
            ours = self.expiry.default_ms or 0
            opened = script("lean_lifetime_open")(self.server, [self.meta_key], [ours])
            stored, self._asks_own = int(opened[0] or 0), bool(opened[1])
            if stored <= 0:
                raise ValueError(
                    f"The lean filter at {self.meta_key!r} needs a DUPEFILTER_LIFETIME in "
                    "seconds (not inf) to cut time into generations: set one, or use "
                    "RFPDupeFilter."
                )
            if stored != ours:
                logger.warning(
                    "DUPEFILTER_LIFETIME is %(ours)s ms but the lean filter %(key)s was "
                    "created with %(stored)s ms: using the filter's.",
                    {"ours": ours, "key": self.meta_key, "stored": stored},
                )
            self._generations = generations_for(self.layout, stored)
        return self._generations

    def generation_keys_of(self, bucket: int) -> list[str]:
        """The keys of ``bucket`` in every generation that may be live now (a forget, see
        lean.py): none if no lifetime is stored with the filter (whatever this process's
        DUPEFILTER_LIFETIME: ``scrapy redis forget`` may run without it)."""
        try:
            stored = int(self.server.hget(self.meta_key, "lifetime_ms") or 0)
        except ValueError:  # not what a worker writes: no generations to look in
            stored = 0
        if stored <= 0:
            return []
        generations = generations_for(self.layout, stored)
        if self._clock is None:
            self._clock = ServerClock(self.server)
        k0 = self._clock.now_ms() // generations.span_ms  # (live: k0 + 1 .. k0 + G + 1)
        return generations.keys(self.bucket_base, [bucket], k0)

    def expiry_stale(self) -> None:
        """A script found the batch's generations or buckets stale: read the server's
        clock and whether the own buckets are asked again, for the next batch."""
        if self._clock is not None:
            self._clock.read_again()
        self._generations = None

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
        """Record ``fingerprints`` (``lifetimes`` in ms, 0 = forever) in one script call
        applied once (sent again while it finds its generations stale); for each, whether
        it was seen (alive)."""
        if not fingerprints:
            return []
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

    def _located(
        self, fingerprints: Sequence[str], lifetimes: Sequence[int]
    ) -> tuple[list[str], list[Any], bytes]:
        """The batch's keys, members and config for ``lua/_lean_expiry.lua``: the buckets
        located once (a generation's buckets are cut like the filter's own), the live
        generations from the server's clock, and the own buckets if they may hold members
        or one is kept forever."""
        layout, generations = self.layout, self.generations
        index_of: dict[int, int] = {}
        members: list[Any] = [
            [index_of.setdefault(bucket, len(index_of)) + 1, member]
            for bucket, member in layout.locate_many(fingerprints)
        ]
        if self._clock is None:
            self._clock = ServerClock(self.server)
        live = self._clock.now_ms() // generations.span_ms + 1
        own = self._asks_own or any(lifetime <= 0 for lifetime in lifetimes)
        keys = [self.meta_key, *(layout.keys_of(self.bucket_base, index_of) if own else ())]
        keys += generations.live_keys(self.bucket_base, index_of, live)
        span, longest = generations.span_ms, generations.lifetime_ms
        config = [live, span, longest, len(index_of), GENERATIONS, int(own)]
        return keys, members, batch_arg(config)
