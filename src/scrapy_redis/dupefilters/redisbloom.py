"""The Bloom filter's backends: which one a filter uses (BLOOMFILTER_BACKEND), and the
RedisBloom side (``BF.*``: Redis 8, Redis Stack) of
:class:`~scrapy_redis.dupefilters.bloom.BloomDupeFilter`.

RedisBloom checks and records a batch with ``BF.INSERT`` in one script call
(``bloom_module_add.lua``; under the scheduler, the push script's "redisbloom" mode,
``lua/_redisbloom.lua``), grows the filter itself (EXPANSION 2) and keeps its sizes
(``BF.INFO``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import msgpack  # type: ignore[import-untyped]
from redis.exceptions import ResponseError

from scrapy_redis import defaults
from scrapy_redis.connection import is_cluster
from scrapy_redis.dupefilters.bloom_layout import REDISBLOOM_EXPANSION, BloomLayout
from scrapy_redis.exceptions import ConfigurationError
from scrapy_redis.store.scripts import script

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from scrapy_redis.store.writes import WriteIds

#: The Bloom filter's logger (its module's name): both halves log as the filter.
logger = logging.getLogger("scrapy_redis.dupefilters.bloom")

BACKENDS = ("auto", "lua", "redisbloom")


def pack(value: Any) -> bytes:
    """``value`` as the filter's scripts read their params (msgpack)."""
    packed: bytes = msgpack.packb(value, use_bin_type=False)
    return packed


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


def module_counts(server: Any, keys: list[str]) -> list[int | None]:
    """The count of each RedisBloom filter of ``keys`` (None: absent), by one pipeline of
    ``EXISTS`` (BF.INFO of no filter is an error) and ``BF.INFO`` a key: one round trip.
    On a Redis Cluster each command names its node (the keys of one filter share a hash
    slot), or redis-py's cluster pipeline would ask the server for its keys first."""
    pipe = server.pipeline(transaction=False)
    for key in keys:
        options = {"target_nodes": server.get_node_from_key(key)} if is_cluster(server) else {}
        pipe.execute_command("EXISTS", key, **options)
        pipe.execute_command("BF.INFO", key, **options)
    replies = pipe.execute(raise_on_error=False)
    return [_count(exists, info) for exists, info in zip(replies[::2], replies[1::2], strict=True)]


def _count(exists: Any, info: Any) -> int | None:
    """The count in a pipelined EXISTS and BF.INFO of a key (None: absent)."""
    if isinstance(exists, Exception):
        raise exists
    if not exists or (isinstance(info, ResponseError) and "not found" in str(info)):
        return None  # (not found: dropped in between, expired)
    if isinstance(info, Exception):
        raise info
    return redisbloom_info(info).get("count", 0)


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


class RedisBloomBackend:
    """The RedisBloom half of :class:`~scrapy_redis.dupefilters.bloom.BloomDupeFilter`:
    its batches, its BF.INFO and the warning when RedisBloom adds a layer."""

    server: Any
    key: str
    layout: BloomLayout
    writes: WriteIds
    module_info: dict[str, int]

    def _module_params(self) -> bytes:
        """How BF.INSERT makes the filter if it does not exist (``lua/_redisbloom.lua``)."""
        return pack([self.layout.capacity, repr(self.layout.error_rate), REDISBLOOM_EXPANSION])

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

    def _update_stats(self, count: int) -> None:  # pragma: no cover - BloomDupeFilter's
        raise NotImplementedError
