"""The Bloom duplicate filter: ~2 bytes per URL, shared by every worker, atomic.

:class:`BloomDupeFilter` keeps the fingerprints of :class:`~scrapy_redis.dupefilter.RFPDupeFilter`
in a layered, blocked Bloom filter (geometry: :mod:`scrapy_redis.dupefilters.bloom_layout`):

* the filter's key is a hash holding its layout, made with the filter (``bloom_open.lua``);
  a worker whose settings give another layout refuses to open it. Deleting that key (as
  the scheduler does with its shared keys) deletes the filter: the next one is a new
  generation, whose maker deletes the blocks of the old ones (listed in ``<key>:bloom``);
* one script call checks and records a whole batch, atomically and at most once (see
  :mod:`scrapy_redis.store.writes`): workers racing on a URL see it new once. Under the
  scheduler it is the call that pushes the batch (:meth:`BloomDupeFilter.seen_bits`, the
  ``BitFilter`` of :mod:`scrapy_redis.queues.seen_sets`); alone, ``bloom_add.lua``;
* when the newest layer holds its capacity the same call adds a larger, tighter layer
  (the total error rate stays under BLOOMFILTER_ERROR_RATE); the filter logs a warning;
* on a server with RedisBloom's ``BF.*`` (Redis 8, Redis Stack) the filter's key is a
  RedisBloom filter instead (BLOOMFILTER_BACKEND), checked and recorded with
  ``BF.INSERT`` in the same calls (the push script's "redisbloom" mode,
  ``lua/_redisbloom.lua``); RedisBloom grows it (EXPANSION 2) and keeps its sizes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from scrapy_redis import defaults
from scrapy_redis.connection import is_cluster
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.dupefilters.bloom_expiry import BloomExpiry, check_lifetime
from scrapy_redis.dupefilters.bloom_layout import (
    BloomLayout,
    Layer,
    blocks_of,
    hex_digests,
    layout_from_settings,
)
from scrapy_redis.dupefilters.bloom_meta import MAX_LAYERS, BloomMeta
from scrapy_redis.dupefilters.redisbloom import (
    BACKENDS,
    RedisBloomBackend,
    backend_setting,
    choose_backend,
    pack,
)
from scrapy_redis.exceptions import ConfigurationError, ScrapyRedisError
from scrapy_redis.queues.seen_sets import SeenBits, SeenMembers
from scrapy_redis.store.keys import bloom_block_key, bloom_blocks_key
from scrapy_redis.store.scripts import script

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from typing_extensions import Self

logger = logging.getLogger(__name__)

#: Fingerprints per script call (a call blocks the server while it runs).
BATCH_SIZE = 500
#: Block key names kept per filter (a batch names the blocks it falls in).
_NAMES_KEPT = 1 << 16


class BloomForgetError(ScrapyRedisError, NotImplementedError):
    """A Bloom filter cannot forget one URL."""


class BloomDupeFilter(BloomExpiry, BloomMeta, RedisBloomBackend, RFPDupeFilter):
    """Redis Bloom-filter request duplicates filter (see the module's docstring).

    Built like :class:`RFPDupeFilter` (``from_crawler``: a one-time key; ``from_spider``:
    the scheduler's SCHEDULER_DUPEFILTER_KEY), sized by BLOOMFILTER_CAPACITY and
    BLOOMFILTER_ERROR_RATE. A false positive drops a new URL: at most the configured rate.
    """

    logger = logger
    #: The scheduler's push script checks and records the bits (see seen_bits()).
    checks_in_script: ClassVar[bool] = True
    #: DUPEFILTER_LIFETIME: time generations (see :mod:`.bloom_expiry`).
    supports_expiry: ClassVar[bool] = True
    #: Under the scheduler's push script, the fill is read (one HMGET) every this many
    #: batches, for the stats.
    fill_check_every: ClassVar[int] = 64
    _calls = 0

    def __init__(
        self,
        server: Any,
        key: str,
        debug: bool = False,
        *,
        layout: BloomLayout | None = None,
        backend: str = defaults.BLOOMFILTER_BACKEND,
        **kwargs: Any,
    ) -> None:
        super().__init__(server, key, debug, **kwargs)
        default = BloomLayout(defaults.BLOOMFILTER_CAPACITY, defaults.BLOOMFILTER_ERROR_RATE)
        self.layout = layout or default
        if backend not in BACKENDS:
            raise ConfigurationError(f"BLOOMFILTER_BACKEND = {backend!r} is not one of {BACKENDS}.")
        self.backend_setting = backend
        #: "lua" or "redisbloom" once opened.
        self.backend: str | None = None
        self.layers: list[Layer] = []
        self.generation = ""
        #: A RedisBloom filter's BF.INFO as last read (see redisbloom_info()).
        self.module_info: dict[str, int] = {}
        #: Made from the known layers (see _forget_layers()).
        self._packed_params = b""
        self._block_names: dict[tuple[int, int], str] = {}

    @classmethod
    def _build(cls, crawler: Crawler, key: str, temporary: bool) -> Self:
        dupefilter = super()._build(crawler, key, temporary)
        dupefilter.layout = layout_from_settings(crawler.settings)
        dupefilter.backend_setting = backend_setting(crawler.settings)
        check_lifetime(dupefilter.expiry)
        return dupefilter

    def for_lane(self, key: str, lanes: int) -> Self:
        """A lane's filter, sized for its share of BLOOMFILTER_CAPACITY (a layout given by
        the fork's BLOOMFILTER_BIT is each lane's)."""
        lane = super().for_lane(key, lanes)
        if self.layout.first is None:
            share = max(1, -(-self.layout.capacity // lanes))
            lane.layout = BloomLayout(share, self.layout.error_rate)
        lane.backend, lane.layers, lane.generation, lane.module_info = None, [], "", {}
        lane._calls = 0
        lane._forget_layers()
        lane._forget_generations()
        return lane

    def open(self) -> None:
        """Choose the backend and open (or make) the filter; done by the first use otherwise."""
        if self.backend is None:
            backend = choose_backend(self.server, self.backend_setting, self.key)
            if self.expiry is not None:
                backend = self._expiry_backend(backend)
            elif backend == "lua":
                self._load_meta()
            else:
                kind = self.server.type(self.key)
                kind = kind.decode() if isinstance(kind, bytes) else str(kind)
                if kind not in ("none", "MBbloom--"):
                    raise self._wrong_type(kind)
            self.backend = backend
            self._update_stats(self.count())

    def request_seen(self, request: Request) -> bool:
        """Record the fingerprint of ``request``; True if the filter had it (or a false
        positive: at most BLOOMFILTER_ERROR_RATE of new requests)."""
        fingerprint = self.request_fingerprint(request)
        if self.expiry is not None:
            return self.seen_expiring([fingerprint], [self.expiry.lifetime_ms(request)])[0]
        return self.seen_many([fingerprint])[0]

    def seen_many(self, fingerprints: Sequence[str]) -> list[bool]:
        """Record ``fingerprints`` (in order, a batch per script call); for each, True if it was
        seen already (earlier in the list included)."""
        self.open()
        if self.expiry is not None:
            return self.seen_expiring(fingerprints, [self.expiry.default_ms] * len(fingerprints))
        seen: list[bool] = []
        while len(seen) < len(fingerprints):
            batch = list(fingerprints[len(seen) : len(seen) + BATCH_SIZE])
            module = self.backend == "redisbloom"
            flags = self._module_batch(batch) if module else self._batch(batch)
            # the Lua filter answers for fewer when its newest layer fills: the rest is sent again
            seen.extend(flag == ord("0") for flag in flags)
        return seen

    def _batch(self, fingerprints: list[str]) -> bytes:
        writes = self.writes
        number = writes.take_for(tuple(fingerprints))
        digests = hex_digests(fingerprints)
        for _ in range(MAX_LAYERS):
            blocks, numbers = self._blocks(digests)
            keys = [writes.key(self.meta_key), *self._own_keys(), *blocks]
            args = [writes.ttl_ms, number, self._params(), numbers, *digests]
            flags, layers, count = script("bloom_add")(self.server, keys, args)
            if flags != b"stale":
                break
            self._reload()  # a layer was added (or the filter cleared) since we looked
        else:
            raise ScrapyRedisError(f"The Bloom filter {self.meta_key} keeps changing its layers.")
        writes.confirmed()
        self._after_batch(int(layers), int(count))
        return bytes(flags)

    def seen_bits(self, fingerprints: Sequence[str]) -> SeenBits | None:
        """The filter's keys (with the blocks ``fingerprints`` fall in) and params, and
        ``fingerprints`` as 40 hex digits, for ``lua/_bloom.lua`` (the scheduler's push
        script computes their bits, checks and records them with the push); for a
        RedisBloom filter, its key and params (``lua/_redisbloom.lua``: BF.INSERT in the
        push script)."""
        self.open()
        if self.backend == "redisbloom":
            params = [self._module_params()]
            return SeenBits(self.key, [self.key], params, list(fingerprints), mode="redisbloom")
        digests = hex_digests(fingerprints)
        blocks, numbers = self._blocks(digests)
        keys = [*self._own_keys(), *blocks]
        return SeenBits(self.key, keys, [self._params(), numbers], digests)

    def _own_keys(self) -> list[str]:
        """The meta hash and the hash listing the blocks (``fkeys[1..2]`` in the script)."""
        return [self.meta_key, bloom_blocks_key(self.key, is_cluster(self.server))]

    def _blocks(self, digests: Sequence[str]) -> tuple[list[str], bytes]:
        """The keys of the blocks ``digests`` fall in, layer by layer, and their numbers,
        packed (``blocks`` in ``lua/_bloom.lua``): all the script computes for itself."""
        keys: list[str] = []
        numbers: list[list[int]] = []
        names = self._block_names
        for index, layer in enumerate(self.layers):
            touched = list(blocks_of(digests, index, layer.blocks))
            for block in touched:
                name = names.get((index, block))
                if name is None:
                    name = self._block_key(index, block)
                keys.append(name)
            numbers.append(touched)
        return keys, pack(numbers)

    def _block_key(self, layer: int, block: int) -> str:
        """The key of ``block`` of ``layer``, kept (up to :data:`_NAMES_KEPT`)."""
        if len(self._block_names) >= _NAMES_KEPT:
            self._block_names.clear()
        name = bloom_block_key(self.key, self.generation, layer, block, is_cluster(self.server))
        self._block_names[layer, block] = name
        return name

    def _params(self) -> bytes:
        """The known layers, packed for ``lua/_bloom.lua`` (made again when they change)."""
        if not self._packed_params:
            layers = self.layers
            upcoming = self.layout.layer(len(layers))
            params = [
                len(layers),
                self.generation,
                [layer.k for layer in layers],
                [layer.blocks for layer in layers],
                [layer.block_bits for layer in layers],
                upcoming.capacity,
                upcoming.describe(),
                upcoming.blocks,
            ]
            self._packed_params = pack(params)
        return self._packed_params

    def _forget_layers(self) -> None:
        """Drop what was made from the known layers (their params, their blocks' names)."""
        self._packed_params = b""
        self._block_names = {}

    def bits_answered(self, answered: int, asked: int) -> None:
        """After a push script's reply: a short answer means the newest layer filled (the
        script added the next one); the fill is read every :attr:`fill_check_every` calls."""
        self._calls += 1
        if self.backend == "redisbloom":
            if self._calls % self.fill_check_every == 0:
                self._after_module_batch(self._read_module_info())
        elif answered < asked or self._calls % self.fill_check_every == 0:
            meta = self.server.hmget(self.meta_key, "layers", "count")
            self._after_batch(int(meta[0] or 0), int(meta[1] or 0))

    def bits_stale(self) -> None:
        """A push script found other layers or another generation: read the filter again
        (the call that filled a layer answers in full: its growth is found here)."""
        self._reload()

    def seen_members(self, fingerprints: Sequence[str]) -> SeenMembers:
        """Refused: a Bloom filter's fingerprints are bits, not set members (seen_bits())."""
        raise TypeError(
            f"{type(self).__name__} keeps bits, not set members: use seen_bits() or seen_many()"
        )

    def _after_batch(self, layers: int, count: int) -> None:
        if layers != len(self.layers):
            self._reload(count)
        elif self.stats is not None:
            self.stats.set_value("dupefilter/fill", self._fill(count))

    def _reload(self, count: int | None = None) -> None:
        """Read the filter's layers again (a call added one, here or on another worker, or
        the filter was made anew); warn if it grew. ``count``: the filter's, if known."""
        layers, generation = len(self.layers), self.generation
        self._load_meta()
        if count is None:
            count = self.count()
        if self.generation == generation and len(self.layers) > layers:
            newest = self.layers[-1]
            logger.warning(
                "Bloom filter %s is past its capacity: %d URLs in %d layers; added a layer for "
                "%d more URLs at error rate %g (%.1f MB). Set BLOOMFILTER_CAPACITY to the "
                "crawl's size to keep it at its smallest.",
                self.meta_key, count, len(self.layers), newest.capacity, newest.error_rate,
                newest.bits / 8e6,
            )  # fmt: skip
        self._update_stats(count)

    def capacity(self) -> int:
        """URLs the known layers hold at their error rates (with DUPEFILTER_LIFETIME: URLs
        each generation holds at its rate)."""
        if self.expiry is not None:
            return self.time_generations.layer.capacity
        if self.backend == "redisbloom":
            return self.module_info.get("capacity", self.layout.capacity)
        return sum(layer.capacity for layer in self.layers)

    def key_types(self) -> list[tuple[str, str]]:
        """The filter's key: the hash of its layout (its blocks are many: not checked), or
        a RedisBloom filter (with DUPEFILTER_LIFETIME, always a hash: its generations')."""
        backend = self.backend or choose_backend(self.server, self.backend_setting, self.key)
        module = backend == "redisbloom" and self.expiry is None
        return [(self.key, "MBbloom--" if module else "hash")]

    def count(self) -> int:
        """About how many fingerprints were recorded (new ones; false positives not); with
        DUPEFILTER_LIFETIME, in the live generations."""
        if self.backend is None:
            self.open()
        if self.expiry is not None:
            return sum(self.generation_counts().values())
        if self.backend == "redisbloom":
            self.module_info = self._read_module_info()
            return self.module_info.get("count", 0)
        return int(self.server.hget(self.meta_key, "count") or 0)

    def _update_stats(self, count: int) -> None:
        if self.stats is None:
            return
        layers = self.module_info.get("layers", 1) if self.backend == "redisbloom" else 0
        self.stats.set_value("dupefilter/capacity", self.capacity())
        if self.expiry is not None:
            self.generations_fill()
            return
        self.stats.set_value("dupefilter/layers", max(1, len(self.layers), layers))
        self.stats.set_value("dupefilter/fill", self._fill(count))

    def _fill(self, count: int) -> float:
        """``count`` as a fraction of the capacity of the known layers."""
        capacity = self.capacity()
        return round(count / capacity, 4) if capacity else 0.0

    def clear(self) -> None:
        """Delete the filter: its meta hash, every block of every layer, its RedisBloom key,
        its live generations (DUPEFILTER_LIFETIME)."""
        self.clear_generations()
        self.server.unlink(self.key)
        self._delete_blocks(keep=None)
        self.server.unlink(bloom_blocks_key(self.key, is_cluster(self.server)))
        self.backend, self.layers, self.module_info = None, [], {}
        self._forget_generations()

    def forget(self, *args: Any, **kwargs: Any) -> None:
        """Impossible: a Bloom filter's bits are shared by many URLs."""
        raise BloomForgetError(
            "A Bloom filter cannot forget a URL: its bits are shared with other URLs, so "
            "clearing them would make those be crawled again. Use the exact filter "
            "(scrapy_redis.dupefilter.LeanDupeFilter or RFPDupeFilter) to forget URLs, or "
            "clear() this one."
        )

    forget_fingerprints = forget
