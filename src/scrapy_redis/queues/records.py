"""The lease record: where popped entries came from, and the entries.

The Lua scripts write one per lease (``pack_record()`` in ``lua/_leases.lua``,
in the leases hash) and one per dead letter (``lua/lease_requeue.lua``, one
entry each): a msgpack array ``{op, key, key2, arg, entry...}``.

* ``op`` says how an entry goes back: ``rpush``/``lpush`` (to the list ``key``:
  a list queue, or a list of start messages), ``prio`` (``LPUSH`` to the priority
  list ``key``, and its priority ``arg`` added to the index ``key2``), ``zadd``
  (to the sorted set ``key`` with the score ``arg``), ``sadd`` (to the set ``key``) or
  ``slot`` (to the per-slot queues whose requests are the sorted set ``key``, see
  :mod:`scrapy_redis.politeness`), or ``place`` (an in-flight place of a slot taken by a
  request outside the queue, its robots.txt: ``<slot> NUL <id>``; nothing goes back);
* the entries follow in pop order; an entry whose work is done is ``false``. A dead
  letter of the per-slot queues (``slot``) holds its request's own bytes, its slot as
  ``key2`` and its id (24 hex digits: priority, sequence) as ``arg``.

This module is the only Python code that reads the format (documented for users in
docs/keys.rst, "Lease records").
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack  # type: ignore[import-untyped]

#: How many fields come before the entries (op, key, key2, arg).
HEADER_FIELDS = 4
#: A per-slot queue's member holds 2^47 - 1 - its priority, in 12 hex digits.
PRIORITY_BIAS = 2**47 - 1
#: The characters of a per-slot queue member's id (priority, sequence).
MEMBER_ID = 24


def member_parts(member: bytes) -> tuple[bytes, bytes, bytes] | None:
    """A per-slot queue's member split: its slot, its id (24 hex: priority, sequence) and
    its request; None if it is not one."""
    slot, zero, rest = member.partition(b"\0")
    if not zero or len(rest) < MEMBER_ID:
        return None
    return slot, rest[:MEMBER_ID], rest[MEMBER_ID:]


def id_priority(member_id: bytes) -> int | None:
    """The priority a per-slot queue member's id holds (None if it holds none)."""
    try:
        return PRIORITY_BIAS - int(member_id[:12], 16)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Record:
    """A lease record (or a dead letter's), unpacked."""

    op: bytes
    key: str
    #: The index of a priority list (``prio``), else empty; as stored.
    key2: bytes
    arg: bytes
    #: In pop order; ``False`` for an entry whose work is done.
    entries: list[bytes | bool]

    @property
    def keys(self) -> list[str]:
        """The keys its entries go back to (the index too for a priority list)."""
        if self.op in (b"slot", b"place"):  # the per-slot queues' keys, from <base>:pq
            base = self.key[: -len("pq")]
            return [self.key, *(base + name for name in ("ready", "waiting", "slots", "seq"))]
        return [self.key, self.key2.decode()] if self.op == b"prio" else [self.key]

    @property
    def priority(self) -> int | None:
        """The priority of a priority queue's entries, or of a per-slot queue's dead
        letter; None for the other ops."""
        if self.op == b"slot" and self.arg:
            return id_priority(self.arg)
        return int(self.arg) if self.op == b"prio" else None


def unpack_record(raw: bytes) -> Record:
    """The record packed in ``raw`` (ValueError or msgpack's errors if malformed)."""
    fields = msgpack.unpackb(raw, raw=True)
    op, key, key2, arg = fields[:HEADER_FIELDS]
    return Record(op, key.decode(), key2, arg, fields[HEADER_FIELDS:])


def record_keys(raw: bytes) -> list[str]:
    """The keys a packed record names (where its entries go back to)."""
    return unpack_record(raw).keys


def record_entries(packed: bytes) -> list[bytes]:
    """The entries of a record a pop script returned (``b""``: none).

    A pop returns the record of the lease it made (all its entries not done yet):
    one bulk reply and one C call cost less than parsing a reply per entry.
    """
    return msgpack.unpackb(packed, raw=True)[HEADER_FIELDS:] if packed else []
