"""Where a filter records fingerprints, for the scheduler's push script.

A duplicate filter whose fingerprints live in Redis can be checked and recorded
inside the script that pushes a batch of requests (one round trip per batch).
It tells the script where each fingerprint goes:

* a filter of sets (:class:`SetFilter`) names a member of one of a few set keys.
  :class:`~scrapy_redis.dupefilter.RFPDupeFilter` records the hex fingerprint in
  its one set; a filter that buckets fingerprints into many small sets (integer
  members, kept as intsets) names the bucket of each;
* a Bloom filter (:class:`BitFilter`) names its keys (the blocks the batch falls
  in) and gives each fingerprint as 40 hex digits, from which the script computes
  its bits (``lua/_bloom.lua``). It may answer for the first requests of a batch
  only (its newest layer filled: the caller sends the others again) or find that
  the filter changed since it looked (another worker added a layer: it looks
  again and the call is sent again).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class SeenMembers:
    """A batch of fingerprints as set members: ``members[i]`` is ``(index into keys,
    member)`` for the i-th fingerprint of the batch."""

    #: The key the filter is known by (its writes' record key and Cluster slot checks).
    base: str
    keys: list[str]
    members: list[tuple[int, str | int]]
    #: A hash whose field ``count`` the script increases by the members it added (a
    #: filter that keeps its own exact count), or None.
    counter: str | None = None


@runtime_checkable
class SetFilter(Protocol):
    """A filter the push script can check and record in: fingerprints as set members."""

    def seen_members(self, fingerprints: Sequence[str]) -> SeenMembers:
        """Where each of ``fingerprints`` is recorded (no Redis call)."""
        ...


def single_set(key: str, fingerprints: Sequence[str]) -> SeenMembers:
    """Every fingerprint a member of the one set ``key`` (the original's layout)."""
    return SeenMembers(key, [key], [(0, fingerprint) for fingerprint in fingerprints])


@dataclass(frozen=True, slots=True)
class SeenBits:
    """A batch of fingerprints for a Bloom filter's part of a push script (see
    ``lua/_bloom.lua``)."""

    #: The key the filter is known by (its writes' record key and Cluster slot checks).
    base: str
    #: Its meta hash, the hash listing its blocks, the blocks the batch falls in; a
    #: RedisBloom filter's key.
    keys: list[str]
    #: The script's arguments: the filter's params and the batch's blocks.
    args: list[Any]
    #: The fingerprints of the batch as the script takes them, in order: 40 hex digits
    #: (the script computes their bits), or the fingerprints themselves (RedisBloom).
    members: list[str]
    #: The push script's filter mode: "bloom" (ours, in strings: ``lua/_bloom.lua``) or
    #: "redisbloom" (``BF.INSERT``: the members of the batch are the fingerprints).
    mode: str = "bloom"


@runtime_checkable
class BitFilter(Protocol):
    """A Bloom filter the push script can check and record in."""

    def seen_bits(self, fingerprints: Sequence[str]) -> SeenBits | None:
        """The keys of the filter and ``fingerprints`` as the script takes them (no Redis
        call once the filter is open); None if this filter is not checked in a script
        (then :meth:`seen_many`)."""
        ...

    def bits_answered(self, answered: int, asked: int) -> None:
        """A push script answered for the first ``answered`` of its ``asked`` requests
        (fewer: the newest layer filled)."""
        ...

    def bits_stale(self) -> None:
        """A push script found the filter changed: look at it again."""
        ...

    def seen_many(self, fingerprints: Sequence[str]) -> list[bool]:
        """Check and record ``fingerprints`` on their own (no push in the same call)."""
        ...


@dataclass(frozen=True, slots=True)
class SeenExpiring:
    """A batch of fingerprints that expire (DUPEFILTER_LIFETIME), for a push script: the
    filter's keys, the script's arguments from the filter's mode on, and per fingerprint
    (the batch's requests that have one, in order) its member as the script takes it."""

    #: The key the filter is known by (its writes' record key and Cluster slot checks).
    base: str
    keys: list[str]
    args: list[Any]
    members: list[Any]
