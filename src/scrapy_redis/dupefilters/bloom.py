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

import msgpack  # type: ignore[import-untyped]

from scrapy_redis import defaults
from scrapy_redis.connection import is_cluster
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.dupefilters.bloom_layout import (
    REDISBLOOM_EXPANSION,
    BloomLayout,
    Layer,
    blocks_of,
    hex_digests,
    layout_from_settings,
)
from scrapy_redis.exceptions import ConfigurationError, ScrapyRedisError, WrongKeyTypeError
from scrapy_redis.queues.seen_sets import SeenBits, SeenMembers
from scrapy_redis.store.keys import bloom_block_key, bloom_blocks_key
from scrapy_redis.store.scripts import script

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from typing_extensions import Self

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "lua", "redisbloom")
#: Fingerprints per script call (a call blocks the server while it runs).
BATCH_SIZE = 500
_MAX_LAYERS = 64
_MAX_BLOCKS = 1 << 24
#: Block key names kept per filter (a batch names the blocks it falls in).
_NAMES_KEPT = 1 << 16


def _pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=False)
    return packed


class BloomForgetError(ScrapyRedisError, NotImplementedError):
    """A Bloom filter cannot forget one URL."""


def backend_setting(settings: BaseSettings) -> str:
    """BLOOMFILTER_BACKEND, checked."""
    value = str(settings.get("BLOOMFILTER_BACKEND", defaults.BLOOMFILTER_BACKEND)).lower()
    if value not in BACKENDS:
        raise ConfigurationError(
            f"BLOOMFILTER_BACKEND = {value!r} is not one of {', '.join(map(repr, BACKENDS))}."
        )
    return value


#: The fields of BF.INFO read, under the names used here.
_INFO_FIELDS = {
    "Capacity": "capacity",
    "Number of filters": "layers",
    "Number of items inserted": "count",
}


def redisbloom_info(reply: Any) -> dict[str, int]:
    """``capacity``, ``layers`` and ``count`` from a BF.INFO reply: a flat list of names and
    values (from a script, or a redis-py without a parser for it) or a dict (redis-py 8)."""
    if isinstance(reply, dict):
        pairs = list(reply.items())
    else:
        pairs = list(zip(reply[::2], reply[1::2], strict=True))
    info = {}
    for name, value in pairs:
        text = name.decode() if isinstance(name, bytes) else str(name)
        if text in _INFO_FIELDS:
            info[_INFO_FIELDS[text]] = int(value)
    return info


def server_has_redisbloom(server: Any) -> bool:
    """Whether the server knows ``BF.MADD`` (``COMMAND INFO`` answers nil for an unknown command;
    unlike ``MODULE LIST`` it needs no admin rights)."""
    # (no reply parsing; on a Redis Cluster any node answers: the nodes run alike)
    options = {"target_nodes": server.get_default_node()} if is_cluster(server) else {}
    reply = server.execute_command("COMMAND INFO", "BF.MADD", **options)
    if isinstance(reply, dict):  # a redis-py that parses the reply
        return any(reply.values())
    return bool(reply) and reply[0] is not None


def choose_backend(server: Any, setting: str, key: str) -> str:
    """The backend ("lua" or "redisbloom") of the filter ``key``, by BLOOMFILTER_BACKEND:
    "auto" keeps a filter that exists where it is, and makes a new one with RedisBloom if
    the server has it."""
    if setting == "lua":
        return "lua"
    has_module = server_has_redisbloom(server)
    if setting == "redisbloom" and not has_module:
        raise ConfigurationError(
            "BLOOMFILTER_BACKEND = 'redisbloom' but the Redis server has no BF.* commands "
            "(RedisBloom, Redis Stack or Redis >= 8). Set BLOOMFILTER_BACKEND = 'lua' (or "
            "'auto') to keep the Bloom filter in plain strings."
        )
    if setting == "auto":
        kind = server.type(key)
        if kind in (b"hash", "hash"):
            return "lua"
        if kind not in (b"none", "none"):  # a RedisBloom filter, or what open() reports
            return "redisbloom" if has_module else "lua"
    return "redisbloom" if has_module else "lua"


class BloomDupeFilter(RFPDupeFilter):
    """Redis Bloom-filter request duplicates filter (see the module's docstring).

    Built like :class:`RFPDupeFilter` (``from_crawler``: a one-time key; ``from_spider``:
    the scheduler's SCHEDULER_DUPEFILTER_KEY), sized by BLOOMFILTER_CAPACITY and
    BLOOMFILTER_ERROR_RATE. A false positive drops a new URL: at most the configured rate.
    """

    logger = logger
    #: The scheduler's push script checks and records the bits (see seen_bits()).
    checks_in_script: ClassVar[bool] = True
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
        return lane

    @property
    def meta_key(self) -> str:
        """The filter's meta hash: its key."""
        return self.key

    def open(self) -> None:
        """Choose the backend and open (or make) the filter; done by the first use otherwise."""
        if self.backend is None:
            backend = choose_backend(self.server, self.backend_setting, self.key)
            if backend == "lua":
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
        return self.seen_many([self.request_fingerprint(request)])[0]

    def seen_many(self, fingerprints: Sequence[str]) -> list[bool]:
        """Record ``fingerprints`` (in order, a batch per script call); for each, True if it was
        seen already (earlier in the list included)."""
        self.open()
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
        for _ in range(_MAX_LAYERS):
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
        return keys, _pack(numbers)

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
            self._packed_params = _pack(params)
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

    def _module_params(self) -> bytes:
        """How BF.INSERT makes the filter if it does not exist (``lua/_redisbloom.lua``)."""
        return _pack([self.layout.capacity, repr(self.layout.error_rate), REDISBLOOM_EXPANSION])

    def _module_batch(self, fingerprints: list[str]) -> bytes:
        writes, key = self.writes, self.key
        number = writes.take_for(tuple(fingerprints))
        args = [writes.ttl_ms, number, self._module_params(), *fingerprints]
        flags, info = script("bloom_module_add")(self.server, [key, writes.key(key)], args)
        writes.confirmed()
        self._after_module_batch(redisbloom_info(info))
        return bytes(flags)

    def _read_module_info(self) -> dict[str, int]:
        """The RedisBloom filter's BF.INFO; empty if it does not exist yet (the first
        BF.INSERT makes it)."""
        if not self.server.exists(self.key):
            return {}
        return redisbloom_info(self.server.execute_command("BF.INFO", self.key))

    def _after_module_batch(self, info: dict[str, int]) -> None:
        """Keep the RedisBloom filter's ``info``; warn if RedisBloom added a layer."""
        before = self.module_info.get("layers", 1)
        self.module_info = info
        if info.get("layers", 1) > before:
            logger.warning(
                "Bloom filter %s (RedisBloom) is past its capacity: %d URLs in %d layers, "
                "room for %d. Set BLOOMFILTER_CAPACITY to the crawl's size to keep it at its "
                "smallest (for a new filter: RedisBloom keeps the sizes it was made with).",
                self.key, info.get("count", 0), info["layers"], info.get("capacity", 0),
            )  # fmt: skip
        self._update_stats(info.get("count", 0))

    def _load_meta(self) -> None:
        """Make the filter if it does not exist; check that its stored layout is ours."""
        ours = self.layout.describe()
        flat = [part for pair in ours.items() for part in pair] + [self.layout.layer(0).blocks]
        keys = [self.meta_key, bloom_blocks_key(self.key, is_cluster(self.server))]
        made, raw = script("bloom_open")(self.server, keys, flat)
        if made == b"wrongtype":
            raise self._wrong_type(raw.decode())
        meta = {raw[i].decode(): raw[i + 1].decode() for i in range(0, len(raw), 2)}
        self.generation = meta.get("generation", "")
        if made:
            self._delete_blocks(keep=self.generation)  # of the filters deleted before
        for field, value in ours.items():
            if meta.get(field) != value:
                raise ConfigurationError(self._disagreement(field, meta.get(field), value))
        layers = int(meta.get("layers", "0"))
        if not 1 <= layers <= _MAX_LAYERS:
            raise ConfigurationError(f"The Bloom filter {self.meta_key} has {layers} layers.")
        self.layers = [self.layout.layer(i) for i in range(layers)]
        self._forget_layers()
        for i, layer in enumerate(self.layers):
            if meta.get(f"layer:{i}") != layer.describe():
                raise ConfigurationError(
                    self._disagreement(f"layer:{i}", meta.get(f"layer:{i}"), layer.describe())
                )

    def _wrong_type(self, kind: str) -> WrongKeyTypeError:
        return WrongKeyTypeError(
            f"{self.key} is a {kind}, not a Bloom filter (a SET holds the fingerprints of "
            "RFPDupeFilter). Set SCHEDULER_DUPEFILTER_KEY to another key, or delete this one "
            "(its URLs may then be crawled again)."
        )

    def _disagreement(self, field: str, stored: str | None, ours: str) -> str:
        if field in ("version", "hash"):
            return (
                f"The Bloom filter {self.meta_key} is stored in format {field} = {stored!r}; "
                f"this scrapy-redis reads {ours!r}. Use the scrapy-redis version that made "
                "it, or clear it (BloomDupeFilter.clear(), or delete its keys: its URLs may "
                "then be crawled again) to start a new one."
            )
        return (
            f"The Bloom filter {self.meta_key} was made with {field} = {stored!r}; these "
            f"settings give {ours!r}. Set BLOOMFILTER_CAPACITY and BLOOMFILTER_ERROR_RATE "
            "(or BLOOMFILTER_BIT and BLOOMFILTER_HASH_NUMBER) as when it was made, or clear "
            "it (BloomDupeFilter.clear(), or delete its keys) to start a new one."
        )

    def capacity(self) -> int:
        """URLs the known layers hold at their error rates."""
        if self.backend == "redisbloom":
            return self.module_info.get("capacity", self.layout.capacity)
        return sum(layer.capacity for layer in self.layers)

    def key_types(self) -> list[tuple[str, str]]:
        """The filter's key: the hash of its layout (its blocks are many: not checked), or
        a RedisBloom filter."""
        backend = self.backend or choose_backend(self.server, self.backend_setting, self.key)
        return [(self.key, "MBbloom--" if backend == "redisbloom" else "hash")]

    def count(self) -> int:
        """About how many fingerprints were recorded (new ones; false positives not)."""
        if self.backend is None:
            self.open()
        if self.backend == "redisbloom":
            self.module_info = self._read_module_info()
            return self.module_info.get("count", 0)
        return int(self.server.hget(self.meta_key, "count") or 0)

    def _update_stats(self, count: int) -> None:
        if self.stats is None:
            return
        layers = self.module_info.get("layers", 1) if self.backend == "redisbloom" else 0
        self.stats.set_value("dupefilter/capacity", self.capacity())
        self.stats.set_value("dupefilter/layers", max(1, len(self.layers), layers))
        self.stats.set_value("dupefilter/fill", self._fill(count))

    def _fill(self, count: int) -> float:
        """``count`` as a fraction of the capacity of the known layers."""
        capacity = self.capacity()
        return round(count / capacity, 4) if capacity else 0.0

    def clear(self) -> None:
        """Delete the filter: its meta hash, every block of every layer, its RedisBloom key."""
        self.server.unlink(self.key)
        self._delete_blocks(keep=None)
        self.server.unlink(bloom_blocks_key(self.key, is_cluster(self.server)))
        self.backend, self.layers, self.module_info = None, [], {}

    def _delete_blocks(self, keep: str | None) -> None:
        """Delete the blocks listed in ``<key>:bloom`` but those of generation ``keep``."""
        cluster = is_cluster(self.server)
        listing = bloom_blocks_key(self.key, cluster)
        for field, value in self.server.hgetall(listing).items():
            generation, _, layer = field.decode().partition(":")
            if not layer or generation == keep:
                continue
            blocks = min(int(value), _MAX_BLOCKS)
            keys = [
                bloom_block_key(self.key, generation, int(layer), b, cluster) for b in range(blocks)
            ]
            for i in range(0, len(keys), 1000):
                self.server.unlink(*keys[i : i + 1000])
            self.server.hdel(listing, field)

    def forget(self, *args: Any, **kwargs: Any) -> None:
        """Impossible: a Bloom filter's bits are shared by many URLs."""
        raise BloomForgetError(
            "A Bloom filter cannot forget a URL: its bits are shared with other URLs, so "
            "clearing them would make those be crawled again. Use the exact filter "
            "(scrapy_redis.dupefilter.LeanDupeFilter or RFPDupeFilter) to forget URLs, or "
            "clear() this one."
        )
