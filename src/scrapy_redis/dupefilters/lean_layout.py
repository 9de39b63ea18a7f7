"""The layout of the lean exact filter: fingerprints cut to integers in small sets.

A fingerprint (hex, as :meth:`RFPDupeFilter.request_fingerprint` gives it) is cut
to its top ``bucket_bits + 32`` bits: the top ``bucket_bits`` choose a bucket (a
Redis set), the next 32 bits are the member, a signed 32-bit integer, so Redis
keeps every bucket as an *intset* (4 bytes per member) while it holds at most
``set-max-intset-entries`` members (512 by default). The bucket count is fixed
when the filter is created, from its capacity, so that buckets hold a few hundred
members at capacity (:func:`layout_for`); the layout is then stored with the data
(see :class:`~scrapy_redis.dupefilters.lean.LeanDupeFilter`) and read back by
every worker. Two fingerprints that agree on those bits are the same request for
the filter: about ``n**2 / 2**(bits + 1)`` of ``n`` distinct requests are wrongly
dropped (:meth:`LeanLayout.expected_collisions`).

Pure functions, no Redis call.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scrapy_redis.store.keys import lean_bucket_key, lean_bucket_keys

#: The layout format; stored in the filter's meta hash (a change of format is a new number).
LAYOUT_VERSION = 1
#: Bits of a member: a signed 32-bit integer, the widest an intset keeps at 4 bytes.
MEMBER_BITS = 32
#: Redis's default ``set-max-intset-entries``, used when CONFIG GET is not allowed.
DEFAULT_INTSET_ENTRIES = 512
#: Fewest and most buckets (as bits): 16 buckets, and 2^28 (a capacity of ~10^11).
MIN_BUCKET_BITS, MAX_BUCKET_BITS = 4, 28
#: How many standard deviations of a bucket's fill stay under the intset limit at capacity.
_SPREAD = 6

_HEX64 = re.compile(r"[0-9a-fA-F]{16}")
_INT32_OFFSET = 1 << 31


@dataclass(frozen=True)
class LeanLayout:
    """How fingerprints map to buckets and members."""

    bucket_bits: int
    #: The capacity the layout was sized for (fingerprints).
    capacity: int
    member_bits: int = MEMBER_BITS
    version: int = LAYOUT_VERSION

    @property
    def bits(self) -> int:
        """Bits of the fingerprint kept: two requests equal on them are one for the filter."""
        return self.bucket_bits + self.member_bits

    @property
    def buckets(self) -> int:
        return 1 << self.bucket_bits

    def locate(self, fingerprint: str) -> tuple[int, int]:
        """``(bucket, member)`` of a fingerprint: its top bits, then the next 32 bits
        as a signed int32."""
        top = top64(fingerprint)
        bucket = top >> (64 - self.bucket_bits)
        member = ((top >> (32 - self.bucket_bits)) & 0xFFFFFFFF) - _INT32_OFFSET
        return bucket, member

    def locate_many(self, fingerprints: Iterable[str]) -> list[tuple[int, int]]:
        """:meth:`locate` of each of ``fingerprints`` (the scheduler's batches)."""
        bucket_shift, member_shift = 64 - self.bucket_bits, 32 - self.bucket_bits
        located = []
        for fingerprint in fingerprints:
            top = top64(fingerprint)
            member = ((top >> member_shift) & 0xFFFFFFFF) - _INT32_OFFSET
            located.append((top >> bucket_shift, member))
        return located

    def locate_parts(self, fingerprints: Iterable[str], buckets: int) -> list[tuple[int, int, int]]:
        """``(bucket, member, generation bucket)`` of each of ``fingerprints``: :meth:`locate`,
        and its bucket among ``buckets`` (a generation's, see lean_expiry.py), from the top
        32 bits, so that a generation's buckets are evenly filled whatever their number."""
        bucket_shift, member_shift = 64 - self.bucket_bits, 32 - self.bucket_bits
        located = []
        for fingerprint in fingerprints:
            top = top64(fingerprint)
            member = ((top >> member_shift) & 0xFFFFFFFF) - _INT32_OFFSET
            located.append((top >> bucket_shift, member, ((top >> 32) * buckets) >> 32))
        return located

    def bucket_key(self, base: str, bucket: int) -> str:
        """The key of ``bucket`` of the filter ``base``."""
        return lean_bucket_key(base, bucket, self.bucket_bits)

    def keys_of(self, base: str, buckets: Iterable[int]) -> list[str]:
        """:meth:`bucket_key` of each of ``buckets``."""
        return lean_bucket_keys(base, buckets, self.bucket_bits)

    def bucket_keys(self, base: str) -> Iterable[str]:
        """Every bucket key, in order (most do not exist until written)."""
        return (self.bucket_key(base, bucket) for bucket in range(self.buckets))

    def expected_collisions(self, count: int) -> float:
        """Expected distinct requests wrongly taken for seen among ``count``: n²/2^(bits+1)."""
        return float(count * count / 2 ** (self.bits + 1))

    def as_meta(self) -> dict[str, int]:
        """The fields stored in the filter's meta hash."""
        return {
            "version": self.version,
            "bucket_bits": self.bucket_bits,
            "member_bits": self.member_bits,
            "capacity": self.capacity,
        }


def top64(fingerprint: str) -> int:
    """The top 64 bits of a hex fingerprint. A fingerprint that does not start with 16
    hex digits (a subclass's own ``request_fingerprint()``) is hashed with SHA1 first."""
    if _HEX64.match(fingerprint) is None:
        fingerprint = hashlib.sha1(fingerprint.encode("utf-8", "surrogatepass")).hexdigest()
    return int(fingerprint[:16], 16)


def target_fill(intset_entries: int) -> int:
    """The largest average bucket fill f at capacity with f + 6·√f ≤ ``intset_entries``:
    the fullest of up to ~2^28 buckets (Poisson fills) then stays an intset."""
    root = (-_SPREAD + math.sqrt(_SPREAD * _SPREAD + 4 * max(intset_entries, 1))) / 2
    return max(1, int(root * root))


def layout_for(capacity: int, intset_entries: int = DEFAULT_INTSET_ENTRIES) -> LeanLayout:
    """The layout for ``capacity`` fingerprints: the fewest buckets (a power of two)
    whose average fill at capacity is at most :func:`target_fill`."""
    fill = target_fill(intset_entries)
    bits = max(0, math.ceil(math.log2(max(capacity, 1) / fill)))
    bits = min(MAX_BUCKET_BITS, max(MIN_BUCKET_BITS, bits))
    return LeanLayout(bucket_bits=bits, capacity=capacity)


def layout_from_meta(meta: Mapping[Any, Any], key: str) -> LeanLayout:
    """The layout stored in a meta hash (read from Redis: checked, untrusted)."""
    try:
        fields = {name: int(meta[name]) for name in ("version", "bucket_bits", "member_bits")}
        capacity = int(meta["capacity"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"The lean filter's meta hash {key!r} is damaged: {exc!r}") from exc
    if fields["version"] != LAYOUT_VERSION or fields["member_bits"] != MEMBER_BITS:
        raise ValueError(
            f"The lean filter at {key!r} has layout version {fields['version']} with "
            f"{fields['member_bits']}-bit members, which this scrapy-redis cannot read "
            f"(it reads version {LAYOUT_VERSION}, {MEMBER_BITS}-bit): use the scrapy-redis "
            "version that created it, or clear the filter."
        )
    if not MIN_BUCKET_BITS <= fields["bucket_bits"] <= MAX_BUCKET_BITS:
        raise ValueError(f"The lean filter's meta hash {key!r} is damaged: {dict(meta)!r}")
    return LeanLayout(bucket_bits=fields["bucket_bits"], capacity=capacity)
