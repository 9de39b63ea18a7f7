"""Fingerprints that expire in the Bloom filter (DUPEFILTER_LIFETIME): time generations.

Time is cut into windows of ``span`` = DUPEFILTER_LIFETIME / :data:`GENERATIONS` ms, by the
Redis server's clock (``TIME`` in the scripts). A fingerprint of lifetime ``L`` recorded at
``t`` has its bits set in the *generation* of the window holding ``t + L``, rounded up: it
lives at least ``L`` and at most one span more. A generation is one fixed Bloom layer
(:func:`~scrapy_redis.dupefilters.bloom_layout.sized_layer`, the bits of the filter's
layer 0) of BLOOMFILTER_CAPACITY fingerprints at 0.9 x BLOOMFILTER_ERROR_RATE /
(GENERATIONS + 1), as blocks ``<key>:bloom:t<generation>:<block>`` and a count
``<key>:bloom:t<generation>``, all of which expire at the end of the window: Redis drops
a generation whole (nothing to sweep). A request is seen if one of the ``GENERATIONS +
1`` live generations holds it (one script call per batch, ``lua/_bloom_expiry.lua``:
checked and recorded at once).

* The false-positive rate: at most the ``GENERATIONS + 1`` live generations hold
  fingerprints (a fingerprint recorded now goes to the newest, which expires
  GENERATIONS + 1 spans from the start of this one), each at most 0.9 x
  BLOOMFILTER_ERROR_RATE / (GENERATIONS + 1) while it holds at most BLOOMFILTER_CAPACITY:
  under the setting.
* The memory: each generation written is a whole layer (a crawl's fingerprints spread
  over its blocks, each allocated whole at its first write): a steady crawl keeps up to
  GENERATIONS + 1 layers, a crawl that finds its URLs at once one or two. A generation
  holds the whole capacity, so a crawl that finds all its URLs within one span keeps
  the rate.
* A request's own lifetime (``meta``) is honoured rounded up to a span; longer than
  DUPEFILTER_LIFETIME, or forever (0 / None), it is cut to DUPEFILTER_LIFETIME: a Bloom
  filter whose fingerprints expire keeps none forever.
* Generations do not grow: one that holds more than its capacity has a higher rate; the
  filter warns (its fill is read every :attr:`BloomExpiry.fill_check_every` batches).

On RedisBloom (BLOOMFILTER_BACKEND) each generation is a RedisBloom filter,
``<key>:bloom:t<generation>``, made by ``BF.INSERT`` with the same capacity and rate
(scaling: RedisBloom grows a generation past its capacity) and expiring whole
(``lua/_redisbloom_expiry.lua``: ``BF.MEXISTS`` on the live ones, then ``BF.INSERT``).

The lifetime, the backend and the generations' layer are stored with the filter (its
meta hash, made by the first worker): every worker cuts time the same way. On a Redis
Cluster every key of a filter is in its key's slot (one script reads them all).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy_redis.connection import is_cluster
from scrapy_redis.dupefilters.bloom_layout import (
    HASH_NAME,
    REDISBLOOM_EXPANSION,
    VERSION,
    BloomLayout,
    Layer,
    blocks_of,
    hex_digests,
    sized_layer,
)
from scrapy_redis.dupefilters.lean_expiry import ServerClock
from scrapy_redis.dupefilters.redisbloom import module_counts
from scrapy_redis.exceptions import ConfigurationError
from scrapy_redis.queues.base import batch_arg
from scrapy_redis.queues.seen_sets import SeenExpiring
from scrapy_redis.store.keys import bloom_generation_block_keys, bloom_generation_key
from scrapy_redis.store.redis_values import UnreadableValueError, integer
from scrapy_redis.store.scripts import script

if TYPE_CHECKING:
    from scrapy_redis.queues.base import Candidate

logger = logging.getLogger("scrapy_redis.dupefilters.bloom")

#: Generations per lifetime: a fingerprint lives at most 1/GENERATIONS longer than asked.
#: More would be more exact, and cost a tighter rate per generation and more of them.
GENERATIONS = 2
#: The share of BLOOMFILTER_ERROR_RATE the live generations share: with all of them full,
#: the rate of k bits rounded and of blocks would reach the setting (measured 0.103 % for
#: 0.1 % at 1.0); 0.9 keeps it under, for 1.3 % more bits.
MARGIN = 0.9
#: Fingerprints per script call of :meth:`BloomExpiry.seen_expiring`.
BATCH_SIZE = 500
#: How often a batch is sent again while the script finds the clock estimate off.
_STALE_TRIES = 8
_MAX_BLOCKS = 1 << 24
_MADE_WITHOUT = (
    "The Bloom filter {key} was made without DUPEFILTER_LIFETIME (its fingerprints never "
    "expire): unset DUPEFILTER_LIFETIME, or clear it (BloomDupeFilter.clear(), or delete "
    "its keys) to start one that expires."
)


@dataclass(frozen=True)
class BloomGenerations:
    """How a Bloom filter cuts time: the longest lifetime and each generation's layer
    (``module``: each generation a RedisBloom filter of the layer's capacity and rate)."""

    lifetime_ms: int
    layer: Layer
    module: bool = False

    @property
    def span_ms(self) -> int:
        return -(-self.lifetime_ms // GENERATIONS)

    @property
    def backend(self) -> str:
        return "redisbloom" if self.module else "lua"

    def describe(self) -> dict[str, str]:
        """What workers sharing the filter must agree on (stored in its meta hash)."""
        ours = {"version": VERSION, "lifetime_ms": str(self.lifetime_ms)}
        ours["generations"] = str(GENERATIONS)
        if self.module:
            return {**ours, "backend": self.backend, "generation_bf": self.module_params()}
        return {**ours, "hash": HASH_NAME, "generation_layer": self.layer.describe()}

    def module_params(self) -> str:
        """A RedisBloom generation's capacity, error rate and expansion."""
        layer = self.layer
        return f"{layer.capacity},{layer.error_rate!r},{REDISBLOOM_EXPANSION}"


def generation_layer(layout: BloomLayout) -> Layer:
    """The layer of each generation: the filter's capacity at :data:`MARGIN` x its rate /
    (GENERATIONS + 1) (as many generations are live)."""
    return sized_layer(layout.capacity, layout.error_rate * MARGIN / (GENERATIONS + 1))


def check_lifetime(expiry: Any) -> None:
    """Refuse a DUPEFILTER_LIFETIME of inf (expiry on, no longest lifetime)."""
    if expiry is not None and not expiry.default_ms:
        raise ValueError(
            "BloomDupeFilter needs DUPEFILTER_LIFETIME in seconds, not inf (the longest "
            "lifetime: it cuts time into generations): set one, or use RFPDupeFilter."
        )


class BloomExpiry:
    """BloomDupeFilter's part for fingerprints that expire (see the module)."""

    server: Any
    key: str
    layout: BloomLayout
    expiry: Any
    writes: Any
    stats: Any
    #: The fill is read every this many batches of the push script, for the stats and
    #: the warning past capacity.
    fill_check_every = 64
    _expiry_calls = 0
    _time_generations: BloomGenerations | None = None
    _clock: ServerClock | None = None
    _warned_generation = -1
    _warned_unreadable = False

    @property
    def time_generations(self) -> BloomGenerations:
        """The generations, as stored with the filter (made by the first worker)."""
        if self._time_generations is None:
            self.open()  # type: ignore[attr-defined]
        assert self._time_generations is not None
        return self._time_generations

    def _expiry_backend(self, backend: str) -> str:
        """Open a filter whose fingerprints expire on ``backend`` (the setting's choice;
        with "auto", a filter's stored backend wins): its backend."""
        kind = self.server.type(self.key)
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind == "MBbloom--":
            raise ConfigurationError(_MADE_WITHOUT.format(key=self.key))
        if self.backend_setting == "auto" and kind == "hash":  # type: ignore[attr-defined]
            stored = self.server.hget(self.key, "backend")
            backend = "redisbloom" if stored in (b"redisbloom", "redisbloom") else "lua"
        layer = generation_layer(self.layout)
        ours = BloomGenerations(self.expiry.default_ms, layer, backend == "redisbloom")
        flat = [part for pair in ours.describe().items() for part in pair]
        made, raw = script("bloom_expire_open")(self.server, [self.key], flat)
        if made == b"wrongtype":
            raise self._wrong_type(raw.decode())  # type: ignore[attr-defined]
        meta = {raw[i].decode(): raw[i + 1].decode() for i in range(0, len(raw), 2)}
        self._time_generations = self._agreed(ours, meta)
        return backend

    def _agreed(self, ours: BloomGenerations, meta: dict[str, str]) -> BloomGenerations:
        """The stored generations: ours but for the lifetime (the stored one wins)."""
        if "layers" in meta:
            raise ConfigurationError(_MADE_WITHOUT.format(key=self.key))
        if meta.get("backend", "lua") != ours.backend:
            stored = meta.get("backend", "lua")
            raise ConfigurationError(
                f"The Bloom filter {self.key} keeps its generations on the {stored!r} "
                f"backend; BLOOMFILTER_BACKEND gives {ours.backend!r}: set it to {stored!r} "
                "(or 'auto'), or clear the filter (BloomDupeFilter.clear()) to start anew."
            )
        for field, value in ours.describe().items():
            if field != "lifetime_ms" and meta.get(field) != value:
                raise ConfigurationError(
                    self._disagreement(field, meta.get(field), value)  # type: ignore[attr-defined]
                )
        stored = int(meta.get("lifetime_ms") or 0)
        if stored != ours.lifetime_ms:
            logger.warning(
                "DUPEFILTER_LIFETIME is %(ours)s ms but the Bloom filter %(key)s was created "
                "with %(stored)s ms: using the filter's.",
                {"ours": ours.lifetime_ms, "key": self.key, "stored": stored},
            )
        return BloomGenerations(stored, ours.layer, ours.module)

    def _forget_generations(self) -> None:
        """Forget what was read of the generations (a lane's filter, a cleared one)."""
        self._time_generations, self._clock = None, None
        self._expiry_calls, self._warned_generation = 0, -1

    def expiring_members(self, candidates: Sequence[Candidate]) -> SeenExpiring:
        """The push script's part for ``candidates`` (``lua/_bloom_expiry.lua``)."""
        fingerprints = [c.fingerprint for c in candidates if c.fingerprint is not None]
        members, keys, config = self._generation_keys(fingerprints)
        lifetimes = batch_arg([c.lifetime_ms for c in candidates])
        self._expiry_calls += 1
        if self._expiry_calls % self.fill_check_every == 0:
            self.generations_fill()
        mode = "redisbloom_expire" if self.time_generations.module else "bloom_expire"
        return SeenExpiring(self.key, keys, [mode, lifetimes, config], members)

    def seen_expiring(self, fingerprints: Sequence[str], lifetimes: Sequence[int]) -> list[bool]:
        """Record ``fingerprints`` (``lifetimes`` in ms, 0: the longest), a batch per script
        call applied once; for each, whether it was seen (alive)."""
        seen: list[bool] = []
        for start in range(0, len(fingerprints), BATCH_SIZE):
            batch = list(fingerprints[start : start + BATCH_SIZE])
            flags = self._expire_add(batch, list(lifetimes[start : start + BATCH_SIZE]))
            seen.extend(flag == ord("0") for flag in flags)
        self._expiry_calls += 1
        if self._expiry_calls % self.fill_check_every == 0:
            self.generations_fill()
        return seen

    def _expire_add(self, batch: list[str], ages: list[int]) -> Any:
        """One script call for ``batch``, applied once (sent again, the server's clock read
        again, while the script finds the clock estimate off): its flags."""
        writes = self.writes
        number = writes.take_for((*batch, *ages))
        name = "bloom_module_expire_add" if self.time_generations.module else "bloom_expire_add"
        for _ in range(_STALE_TRIES):
            members, keys, config = self._generation_keys(batch)
            args = [writes.ttl_ms, number, batch_arg(members), batch_arg(ages), config]
            flags = script(name)(self.server, [writes.key(self.key), *keys], args)
            if flags != b"stale":
                writes.confirmed()
                return flags
            self.expiry_stale()
        raise RuntimeError(f"The Bloom filter {self.key} keeps finding its clock off.")

    def expiry_stale(self) -> None:
        """A script found the batch's generations stale (this worker's estimate of the
        server's clock is off): read the server's clock for the next batch."""
        if self._clock is not None:
            self._clock.read_again()

    def _generation_keys(self, fingerprints: Sequence[str]) -> tuple[list[str], list[str], bytes]:
        """``fingerprints`` as the scripts take them, the keys of generations k0 .. k0 +
        GENERATIONS + 2 (for the blocks the fingerprints fall in) and the scripts' config
        (``lua/_bloom_expiry.lua``, ``lua/_redisbloom_expiry.lua``)."""
        generations = self.time_generations
        layer, cluster = generations.layer, is_cluster(self.server)
        k0 = self._server_ms() // generations.span_ms
        config: list[Any] = [k0, generations.span_ms, generations.lifetime_ms, GENERATIONS]
        live = range(k0, k0 + GENERATIONS + 3)
        if generations.module:
            keys = [bloom_generation_key(self.key, k, cluster) for k in live]
            config += [layer.capacity, repr(layer.error_rate), REDISBLOOM_EXPANSION]
            return list(fingerprints), keys, batch_arg(config)
        digests = hex_digests(fingerprints)
        numbers = sorted(blocks_of(digests, 0, layer.blocks))
        keys = []
        for k in live:
            keys.append(bloom_generation_key(self.key, k, cluster))
            keys += bloom_generation_block_keys(self.key, k, numbers, cluster)
        config += [layer.k, layer.blocks, layer.block_bits, numbers]
        return digests, keys, batch_arg(config)

    def _server_ms(self) -> int:
        if self._clock is None:
            self._clock = ServerClock(self.server)
        return self._clock.now_ms()

    def _live_generations(self) -> range:
        span = self.time_generations.span_ms
        live = self._server_ms() // span + 1
        return range(live - 1, live + GENERATIONS + 2)

    def generation_counts(self) -> dict[int, int]:
        """The fingerprints recorded in each live generation (new ones; none: absent)."""
        cluster = is_cluster(self.server)
        live = list(self._live_generations())
        keys = [bloom_generation_key(self.key, k, cluster) for k in live]
        if not self.time_generations.module:
            counts = zip(live, keys, self.server.mget(keys), strict=True)
            read = {k: self._stored_integer(c, key) for k, key, c in counts if c is not None}
            return {k: count for k, count in read.items() if count is not None}
        held = zip(live, module_counts(self.server, keys), strict=True)
        return {k: count for k, count in held if count is not None}

    def generations_fill(self) -> float:
        """The fullest live generation's count as a fraction of its capacity (the stat
        ``dupefilter/fill``); warns once per generation past its capacity."""
        counts = self.generation_counts()
        capacity = self.time_generations.layer.capacity
        fullest = max(counts, key=counts.__getitem__, default=-1)
        count = counts.get(fullest, 0)
        if count > capacity and fullest != self._warned_generation:
            self._warned_generation = fullest
            logger.warning(
                "Bloom filter %s: a generation holds %d URLs, past its capacity of %d (its "
                "false-positive rate rises). Set BLOOMFILTER_CAPACITY to the URLs the crawl "
                "records within DUPEFILTER_LIFETIME / %d.",
                self.key, count, capacity, GENERATIONS,
            )  # fmt: skip
        fill = round(count / capacity, 4)
        if self.stats is not None:
            self.stats.set_value("dupefilter/fill", fill)
        return fill

    def clear_generations(self) -> None:
        """Delete the keys of every live generation of the filter, as its meta hash
        describes them (whatever this worker's settings; the older ones expired already)."""
        if self.server.type(self.key) not in (b"hash", "hash"):
            return
        lifetime, layer = self.server.hmget(self.key, "lifetime_ms", "generation_layer")
        lifetime_ms = self._stored_integer(lifetime, self.key, "lifetime_ms", 1)
        if lifetime_ms is None:
            return  # not a filter whose fingerprints expire (or not one a worker wrote)
        span = -(-lifetime_ms // GENERATIONS)
        blocks = self._stored_blocks(layer)
        cluster, live = is_cluster(self.server), self._server_ms() // span + 1
        for k in range(live - 1, live + GENERATIONS + 2):
            keys = [bloom_generation_key(self.key, k, cluster)]
            keys += bloom_generation_block_keys(self.key, k, range(blocks), cluster)
            for i in range(0, len(keys), 1000):
                self.server.unlink(*keys[i : i + 1000])

    def _stored_blocks(self, layer: Any) -> int:
        """The blocks per generation the meta hash's ``generation_layer`` gives (0: none,
        RedisBloom's, or unreadable: the blocks then expire with their window)."""
        if not layer:
            return 0
        parts = layer.split(b",") if isinstance(layer, bytes) else str(layer).split(",")
        raw = parts[3] if len(parts) > 3 else layer
        blocks = self._stored_integer(raw, self.key, "generation_layer", 0)
        return min(blocks or 0, _MAX_BLOCKS)

    def _stored_integer(
        self, raw: Any, key: str, field: str | None = None, low: int | None = None
    ) -> int | None:
        """The integer ``raw`` (read from Redis) holds; else None, logged once per filter
        (a value planted by hand must not stop a worker's push or ``clear()``)."""
        try:
            return integer(raw, key, field, low)
        except UnreadableValueError as exc:
            if not self._warned_unreadable:
                self._warned_unreadable = True
                logger.warning("Bloom filter %s: %s, ignored.", self.key, exc.detail)
            return None
