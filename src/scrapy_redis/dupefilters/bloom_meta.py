"""The stored layout of a Lua-side Bloom filter (its meta hash), made, read back and checked,
and the blocks of its older generations deleted: the opening half of
:class:`~scrapy_redis.dupefilters.bloom.BloomDupeFilter`."""

from __future__ import annotations

from typing import Any

from scrapy_redis.connection import is_cluster
from scrapy_redis.dupefilters.bloom_layout import BloomLayout, Layer
from scrapy_redis.exceptions import ConfigurationError, WrongKeyTypeError
from scrapy_redis.store.keys import bloom_block_key, bloom_blocks_key
from scrapy_redis.store.scripts import script

MAX_LAYERS = 64
_MAX_BLOCKS = 1 << 24


class BloomMeta:
    """Opening a Lua-side Bloom filter: ``bloom_open.lua`` makes it or returns its stored
    layout, which must be this worker's (errors name the settings)."""

    server: Any
    key: str
    layout: BloomLayout
    layers: list[Layer]
    generation: str

    @property
    def meta_key(self) -> str:
        """The filter's meta hash: its key."""
        return self.key

    def _load_meta(self) -> None:
        """Make the filter if it does not exist; check that its stored layout is ours."""
        ours = self.layout.describe()
        flat = [part for pair in ours.items() for part in pair] + [self.layout.layer(0).blocks]
        keys = [self.meta_key, bloom_blocks_key(self.key, is_cluster(self.server))]
        made, raw = script("bloom_open")(self.server, keys, flat)
        if made == b"wrongtype":
            raise self._wrong_type(raw.decode())
        meta = {raw[i].decode(): raw[i + 1].decode() for i in range(0, len(raw), 2)}
        if "lifetime_ms" in meta:
            raise ConfigurationError(
                f"The Bloom filter {self.meta_key} was made with DUPEFILTER_LIFETIME (its "
                "fingerprints expire): set DUPEFILTER_LIFETIME as when it was made, or clear "
                "it (BloomDupeFilter.clear(), or delete its keys) to start one that does not."
            )
        self.generation = meta.get("generation", "")
        if made:
            self._delete_blocks(keep=self.generation)  # of the filters deleted before
        for field, value in ours.items():
            if meta.get(field) != value:
                raise ConfigurationError(self._disagreement(field, meta.get(field), value))
        layers = int(meta.get("layers", "0"))
        if not 1 <= layers <= MAX_LAYERS:
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

    def _forget_layers(self) -> None:  # pragma: no cover - BloomDupeFilter's
        raise NotImplementedError
