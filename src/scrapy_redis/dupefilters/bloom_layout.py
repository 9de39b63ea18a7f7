"""The geometry of the Bloom duplicate filter: layers, blocks, bit positions.

A filter is a chain of layers (a scalable Bloom filter, Almeida et al. 2007):
layer ``i`` holds ``ceil(capacity * GROWTH**i)`` fingerprints. Layer 0 gets most of
the error budget (``error_rate * FIRST_SHARE``), since a filter sized for its crawl
never has another; the growth layers share the rest, each ``TIGHTENING`` times the
one before, so that the rates of all layers add up to at most ``error_rate``. A
growth factor of 1.5 (not RedisBloom's 2) keeps the newest layer, nearly empty when
it is added, at about half of what the filter holds: a grown filter costs less per
URL, for a few more layers (5 at 10 times the capacity, 10 at 100 times).

Each layer is split into blocks (one Redis string each) of at least
:data:`BLOCK_MIN_BITS`; all k bits of one fingerprint fall in one block (a blocked
Bloom filter), chosen by a hash, so a fingerprint touches one key per layer.
Everything here is pure arithmetic: the same settings give the same layout on every
worker, and the layout is stored with the filter (see
:mod:`scrapy_redis.dupefilters.bloom`).

Positions (format :data:`VERSION`, :data:`HASH_NAME`) come from a fingerprint as 40
lowercase hex digits (:func:`hex_digest`: a SHA1 hex digest, as Scrapy's fingerprints
are, is taken as it is; another fingerprint is hashed to one), digits numbered from 1:

* the block: in layer 0, digits 1-12 (48 bits) modulo the layer's block count; in a
  layer ``j`` > 0 of a grown filter, digits 33-40 (32 bits) modulo its block count.
  The worker computes it (:func:`blocks_of`): it names the block keys of each call;
* the k bits in the block: from ``h1`` (digits 13-22) and ``h2`` (digits 23-32, 40
  bits each) modulo the block's bit count ``m``, of the fingerprint's digits in layer
  0, of ``SHA1('<digits>:<j>')`` in a layer ``j`` > 0 (bits independent of layer 0's):
  ``h1 + i*h2 + (i^3 - i)/6`` modulo ``m``, for ``i`` from 0 to k-1 (enhanced double
  hashing, Dillinger & Manolios: no short cycles when ``h2`` is 0). The scripts compute
  them (``lua/_bloom.lua``): the worker only sends the digits.

Every number is exact in a Lua double. The modulo makes some blocks likelier than
others by a factor of up to 1 + blocks / 2^32 in a layer ``j`` > 0 (1.0001 at 430,000
blocks, a 27 GB layer), less in layer 0 and for the bits.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from scrapy_redis import defaults
from scrapy_redis.exceptions import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from scrapy.settings import BaseSettings

#: Format of the stored filter; a filter written in another format is not opened (2: the
#: worker computed the bits from a BLAKE2b; 3: the scripts compute them from hex digits).
VERSION = "3"
#: How positions are derived (stored with the filter: workers must agree): see the
#: module's docstring.
HASH_NAME = "sha1-hex-slices-edh"
#: Capacity factor of each new layer: exact (a fraction), so that every worker rounds alike.
GROWTH = Fraction(3, 2)
#: The share of BLOOMFILTER_ERROR_RATE given to layer 0 (the growth layers share the rest).
FIRST_SHARE = 0.7
#: Error-rate factor of each growth layer after the first. Milder than RedisBloom's 0.5:
#: with 1.5 times larger layers a filter has more of them, whose rates would fall fast.
TIGHTENING = 0.7
#: Capacity factor of a RedisBloom filter's layers (``BF.INSERT ... EXPANSION`` takes whole
#: numbers; RedisBloom applies its own error rates).
REDISBLOOM_EXPANSION = 2
#: Smallest block: below 8 KiB the uneven load of blocks raises the error rate.
BLOCK_MIN_BITS = 1 << 16
#: Size a large layer's blocks aim at (64 KiB): many keys, none slow to allocate.
BLOCK_TARGET_BITS = 1 << 19
#: The fork scrapy-redis-bloomfilter's defaults (BLOOMFILTER_BIT, BLOOMFILTER_HASH_NUMBER).
FORK_BIT, FORK_HASH_NUMBER = 30, 6

_LN2 = math.log(2)
_HEX_DIGEST = re.compile("[0-9a-f]{40}").fullmatch
_HEX_DIGEST_LINES = re.compile("(?:[0-9a-f]{40}\n)*").fullmatch
_STRING_OVERHEAD = 16


@dataclass(frozen=True)
class Layer:
    """One layer of the filter: what it holds and how its bits are laid out."""

    capacity: int
    error_rate: float
    k: int
    blocks: int
    block_bits: int

    @property
    def bits(self) -> int:
        return self.blocks * self.block_bits

    def describe(self) -> str:
        """The layer as stored in the filter's meta hash (compared on open)."""
        return f"{self.capacity},{self.error_rate!r},{self.k},{self.blocks},{self.block_bits}"


def hex_digest(fingerprint: str) -> str:
    """``fingerprint`` as the 40 hex digits its bits are taken from: itself if it is a SHA1
    hex digest (the fingerprints of Scrapy and of the original scrapy-redis), else its
    SHA1 (a fingerprinter's own form, whose characters need not be uniform)."""
    if _HEX_DIGEST(fingerprint):
        return fingerprint
    return hashlib.sha1(fingerprint.encode()).hexdigest()


def hex_digests(fingerprints: Sequence[str]) -> list[str]:
    """:func:`hex_digest` of each of ``fingerprints`` (SHA1 hex digests all: one check)."""
    lines = "\n".join(fingerprints) + "\n"
    if len(lines) == 41 * len(fingerprints) and _HEX_DIGEST_LINES(lines):
        return list(fingerprints)
    return [hex_digest(fingerprint) for fingerprint in fingerprints]


def blocks_of(digests: Sequence[str], index: int, blocks: int) -> Iterable[int]:
    """The blocks of layer number ``index`` (of ``blocks`` blocks) that ``digests``
    (:func:`hex_digest`) fall in (see the module's docstring), each once; every block of
    a layer of at most a quarter as many blocks as ``digests`` (nearly all of them would
    be: not worth computing)."""
    if 4 * blocks <= len(digests):
        return range(blocks)
    if index == 0:
        return {int(digest[:12], 16) % blocks for digest in digests}
    return {int(digest[32:], 16) % blocks for digest in digests}


def split_into_blocks(bits: int) -> tuple[int, int]:
    """(blocks, bits per block) for a layer of at least ``bits`` bits: blocks of a size that
    fills its memory allocation (see :func:`block_bytes`)."""
    largest = BLOCK_TARGET_BITS // 8 - _STRING_OVERHEAD  # fills a 64 KiB allocation
    fewest = max(1, math.ceil(bits / (8 * largest)))
    # a few more blocks may round up less (the sizes of allocations are steps)
    splits = [(n, 8 * block_bytes(math.ceil(max(BLOCK_MIN_BITS, bits / n) / 8))) for n in
              range(fewest, fewest + 8)]  # fmt: skip
    return min(splits, key=lambda split: split[0] * split[1])


def block_bytes(wanted: int) -> int:
    """The string length, at least ``wanted`` bytes, that wastes no memory: jemalloc rounds an
    allocation up to one of 4 sizes per power of two, and a string adds a header of up to
    10 bytes (16 kept) to its length: a block of exactly 64 KiB would take 80 KiB."""
    size = wanted + _STRING_OVERHEAD
    step = 1 << max((size - 1).bit_length() - 3, 4)
    return -(-size // step) * step - _STRING_OVERHEAD


def sized_layer(capacity: int, error_rate: float) -> Layer:
    """The smallest layer holding ``capacity`` fingerprints at ``error_rate``."""
    ln_p = -math.log(error_rate)
    bits = math.ceil(capacity * ln_p / _LN2**2)
    k = max(1, round(ln_p / _LN2))
    return Layer(capacity, error_rate, k, *split_into_blocks(bits))


@dataclass(frozen=True)
class BloomLayout:
    """A filter's parameters: total capacity and error rate of its first layer, or the
    first layer itself (``first``: the fork's BLOOMFILTER_BIT and BLOOMFILTER_HASH_NUMBER)."""

    capacity: int
    error_rate: float
    first: Layer | None = None

    def layer(self, index: int) -> Layer:
        """Layer number ``index`` (0: the first)."""
        if index == 0 and self.first is not None:
            return self.first
        return sized_layer(math.ceil(self.capacity * GROWTH**index), self.layer_rate(index))

    def layer_rate(self, index: int) -> float:
        """The error rate of layer ``index``: a share of :attr:`error_rate` such that the
        rates of all layers add up to at most it."""
        if index == 0:
            return self.error_rate * FIRST_SHARE
        growth_share = self.error_rate * (1 - FIRST_SHARE)
        return growth_share * (1 - TIGHTENING) * TIGHTENING ** (index - 1)

    def describe(self) -> dict[str, str]:
        """What workers sharing the filter must agree on (stored in its meta hash)."""
        return {
            "version": VERSION,
            "hash": HASH_NAME,
            "capacity": str(self.capacity),
            "error_rate": repr(self.error_rate),
            "growth": str(GROWTH),
            "first_share": repr(FIRST_SHARE),
            "tightening": repr(TIGHTENING),
            "capacity:0": str(self.layer(0).capacity),
            "layer:0": self.layer(0).describe(),
        }


def fork_layout(bit: int, hash_number: int) -> BloomLayout:
    """The layout of scrapy-redis-bloomfilter's settings: 2**bit bits, hash_number hashes.

    Its capacity is the count at which ``hash_number`` is the best k (m ln 2 / k), where
    the error rate is 2**-k; that is :data:`FIRST_SHARE` of the chain's, whose total rate is
    then 2**-k / FIRST_SHARE (2.2 % for the fork's 6 hashes).
    """
    bits = 1 << bit
    capacity = int(bits * _LN2 / hash_number)
    rate = 0.5**hash_number
    first = Layer(capacity, rate, hash_number, *split_into_blocks(bits))
    return BloomLayout(capacity, rate / FIRST_SHARE, first)


def layout_from_settings(settings: BaseSettings) -> BloomLayout:
    """BLOOMFILTER_CAPACITY and BLOOMFILTER_ERROR_RATE; if the project set neither but set
    the fork's BLOOMFILTER_BIT or BLOOMFILTER_HASH_NUMBER, those."""
    ours = any(settings.getpriority(n) is not None for n in _OURS)
    if not ours and any(settings.getpriority(n) is not None for n in _FORK):
        bit = settings.getint("BLOOMFILTER_BIT", FORK_BIT)
        hash_number = settings.getint("BLOOMFILTER_HASH_NUMBER", FORK_HASH_NUMBER)
        if not (16 <= bit <= 40 and 1 <= hash_number <= 64):
            raise ConfigurationError(
                f"BLOOMFILTER_BIT={bit} / BLOOMFILTER_HASH_NUMBER={hash_number}: the bit count "
                "must be 16..40 and the hash count 1..64; or set BLOOMFILTER_CAPACITY and "
                "BLOOMFILTER_ERROR_RATE instead."
            )
        return fork_layout(bit, hash_number)
    capacity = settings.getint("BLOOMFILTER_CAPACITY", defaults.BLOOMFILTER_CAPACITY)
    rate = settings.getfloat("BLOOMFILTER_ERROR_RATE", defaults.BLOOMFILTER_ERROR_RATE)
    if capacity < 1 or not 0 < rate < 1:
        raise ConfigurationError(
            f"BLOOMFILTER_CAPACITY={capacity} / BLOOMFILTER_ERROR_RATE={rate}: the capacity "
            "must be a positive count of URLs and the error rate between 0 and 1 (e.g. 0.001)."
        )
    return BloomLayout(capacity, rate)


_OURS = ("BLOOMFILTER_CAPACITY", "BLOOMFILTER_ERROR_RATE")
_FORK = ("BLOOMFILTER_BIT", "BLOOMFILTER_HASH_NUMBER")
