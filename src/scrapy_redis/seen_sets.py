"""Where a filter records fingerprints, for the scheduler's push script.

A duplicate filter whose fingerprints live in Redis sets can be checked and
recorded inside the script that pushes a batch of requests (one round trip per
batch). It tells the script where each fingerprint goes: a member of one of a
few set keys. :class:`~scrapy_redis.dupefilter.RFPDupeFilter` records the hex
fingerprint in its one set; a filter that buckets fingerprints into many small
sets (integer members, kept as intsets) names the bucket of each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


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
