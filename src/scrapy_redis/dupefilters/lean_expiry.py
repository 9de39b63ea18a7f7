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

    def keys(self, base: str, buckets: Iterable[int], k0: int) -> list[str]:
        """For each of ``buckets``, its keys of generations ``k0 .. k0 + GENERATIONS + 2``
        (made once per bucket and ``k0``: a batch's buckets are mostly met before)."""
        cache = self._cache
        if cache.get(-1) != (base, k0) or len(cache) > _KEYS_CACHED:
            cache.clear()
            cache[-1] = (base, k0)
        bits, keys = self.layout.bucket_bits, []
        for bucket in buckets:
            names = cache.get(bucket)
            if names is None:
                ks = range(k0, k0 + GENERATIONS + 3)
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

    @property
    def generations(self) -> Generations:
        """The generations (the lifetime stored with the filter; read once)."""
        if self._generations is None:
            ours = self.expiry.default_ms or 0
            stored = int(script("lean_lifetime_open")(self.server, [self.meta_key], [ours]) or 0)
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

    def expiring_members(self, candidates: Sequence[Candidate]) -> SeenExpiring:
        """The push script's part for ``candidates`` (``lua/_lean_expiry.lua``)."""
        fingerprints = [c.fingerprint for c in candidates if c.fingerprint is not None]
        keys, members, config = self._located(fingerprints)
        lifetimes = batch_arg([c.lifetime_ms for c in candidates])
        return SeenExpiring(self.key, keys, ["lean_expire", lifetimes, config], members)

    def seen_expiring(self, fingerprints: Sequence[str], lifetimes: Sequence[int]) -> list[bool]:
        """Record ``fingerprints`` (``lifetimes`` in ms, 0 = forever) in one script call
        applied once; for each, whether it was seen (alive)."""
        if not fingerprints:
            return []
        keys, members, config = self._located(fingerprints)
        writes = self.writes
        number = writes.take_for((*fingerprints, *lifetimes))
        args = [writes.ttl_ms, number, batch_arg(members), batch_arg(list(lifetimes)), config]
        flags = script("lean_expire_add")(self.server, [writes.key(self.key), *keys], args)
        writes.confirmed()
        return [flag == ord("0") for flag in flags]

    def _located(self, fingerprints: Sequence[str]) -> tuple[list[str], list[Any], bytes]:
        """The batch's keys, members and config for ``lua/_lean_expiry.lua``: the buckets
        located once (a generation's buckets are cut like the filter's own) and the
        generations from the server's clock, read once per batch."""
        layout, generations = self.layout, self.generations
        index_of: dict[int, int] = {}
        members: list[Any] = [
            [index_of.setdefault(bucket, len(index_of)) + 1, member]
            for bucket, member in layout.locate_many(fingerprints)
        ]
        if self._clock is None:
            self._clock = ServerClock(self.server)
        k0 = self._clock.now_ms() // generations.span_ms
        keys = [self.meta_key, *layout.keys_of(self.bucket_base, index_of)]
        keys += generations.keys(self.bucket_base, index_of, k0)
        config = [k0, generations.span_ms, generations.lifetime_ms, len(index_of), GENERATIONS]
        return keys, members, batch_arg(config)
