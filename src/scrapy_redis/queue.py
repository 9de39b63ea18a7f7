"""The shared request queues: FIFO, LIFO and priority.

Every queue stores serialized requests (see :mod:`scrapy_redis.serializers`)
under one key, and reads what the original scrapy-redis wrote there when
SCHEDULER_SERIALIZER can decode it:

* :class:`FifoQueue` and :class:`LifoQueue`: a list; ``LPUSH`` to add, ``RPOP``
  (FIFO) or ``LPOP`` (LIFO) to take, as the original did.
* :class:`PriorityQueue`: one list per priority (``<key>:prio:<n>``) plus a
  sorted set at ``<key>`` indexing the non-empty priorities. Higher Scrapy
  priority first, oldest first within a priority, identical requests kept apart.
  Entries the original stored directly in that sorted set are popped in their
  priority order too.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING, Any, ClassVar

import msgpack  # type: ignore[import-untyped]
from redis.client import NEVER_DECODE
from redis.cluster import RedisCluster
from redis.crc import key_slot

from scrapy_redis import defaults
from scrapy_redis._compat import PerInstance
from scrapy_redis.exceptions import (
    ScrapyRedisDeprecationWarning,
    UndecodableRequestError,
    UnserializableRequestError,
)
from scrapy_redis.keys import format_key, invalid_entries_key, needs_formatting, priority_list_key
from scrapy_redis.leases import Ticket, release_args
from scrapy_redis.logsafe import shorten
from scrapy_redis.reqser import dict_to_request, owned_dict_to_request, request_to_dict
from scrapy_redis.scripts import script
from scrapy_redis.serializers import (
    MsgpackSerializer,
    Serializer,
    looks_like_pickle,
    resolve_serializer,
    with_defaults,
)
from scrapy_redis.writes import WriteIds

if TYPE_CHECKING:
    from scrapy import Request, Spider

# Lua's unpack() is limited to a few thousand values: larger push_entries() are split.
_PUSH_CHUNK = 1000
_PICKLE_SERIALIZERS = {"pickle", "scrapy_redis.picklecompat"}


# Entries and candidates are made once per request: not frozen, which costs three times
# as much to build. Neither is changed once made (hashed by value, as when frozen).
@dataclass(slots=True, unsafe_hash=True)
class Entry:
    """A serialized request as stored in Redis, with what is needed to put it back."""

    data: bytes
    priority: int = 0
    #: The sorted-set score of an entry written by the original PriorityQueue.
    legacy_score: bytes | None = None


@dataclass(slots=True, unsafe_hash=True)
class Candidate:
    """A request offered to :meth:`Base.push_new`."""

    #: Its fingerprint; None for a ``dont_filter`` request (neither checked nor recorded).
    fingerprint: str | None
    #: What to store; None to record the fingerprint only (the caller keeps the request).
    entry: Entry | None


def _raw(server: Any, *args: Any) -> Any:
    return server.execute_command(*args, **{NEVER_DECODE: True})


class Base:
    """Common code of the queues: (de)serialization and the queue contract.

    ``key`` is the final key name; a template still holding ``%(spider)s`` is
    formatted with the spider name.
    """

    #: Numbers this queue's pushes, so that a push sent again is applied once (writes.py);
    #: a class-level default for subclasses whose __init__ does not call ours.
    writes = PerInstance(lambda _: WriteIds())
    #: Whether the scheduler pops it through :meth:`pop_entries` with leases (a worker
    #: that dies loses nothing); otherwise through :meth:`pop`, without leases.
    #: A subclass may declare it; if it does not, it is True when the class implements
    #: ``pop_entries()`` and keeps our ``pop()`` (a queue of its own written for the
    #: original, implementing ``pop()``, is popped with it).
    uses_leases: ClassVar[bool] = False
    #: Whether the scheduler may push through :meth:`push_new` (one script call per batch
    #: that also checks the fingerprints); declared, or True unless ``push()`` is overridden.
    uses_push_script: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "uses_leases" not in cls.__dict__:
            cls.uses_leases = cls.pop is Base.pop and cls.pop_entries is not Base.pop_entries
        if "uses_push_script" not in cls.__dict__:
            cls.uses_push_script = cls.push is Base.push

    def __init__(
        self, server: Any, spider: Spider, key: str, serializer: Serializer | Any = None
    ) -> None:
        self.server = server
        self.spider = spider
        self.key = format_key(key, spider.name) if needs_formatting(key) else key
        self.serializer = resolve_serializer(
            defaults.SCHEDULER_SERIALIZER if serializer is None else serializer
        )
        self.writes = WriteIds()

    def _encode_request(self, request: Request) -> bytes:
        """The bytes stored for ``request``; UnserializableRequestError with the reason."""
        try:
            data = self.serializer.dumps(request_to_dict(request, self.spider))
        except Exception as exc:  # any serializer, any failure: normalised here, once
            raise UnserializableRequestError(shorten(str(exc) or repr(exc), 1000)) from exc
        return data.encode() if isinstance(data, str) else data

    def _decode_request(self, encoded: bytes) -> Request:
        """The request stored as ``encoded``; UndecodableRequestError with the fix."""
        try:
            serializer = self.serializer
            if type(serializer) is MsgpackSerializer:  # the stored fields: fewer to build from
                data = serializer.loads_stored(encoded)
                if "_class" in data:  # a subclass may have other defaults than Request
                    data = with_defaults(data)
                return owned_dict_to_request(data, self.spider)
            return dict_to_request(serializer.loads(encoded), self.spider)
        except Exception as exc:  # untrusted data: every failure is a decoding failure
            pickled = looks_like_pickle(encoded) and not self._is_pickle()
            raise UndecodableRequestError(
                self._decode_error_message(exc, pickled), looks_like_pickle=pickled
            ) from exc

    def _is_pickle(self) -> bool:
        return getattr(self.serializer, "__name__", None) in _PICKLE_SERIALIZERS

    def _decode_error_message(self, exc: Exception, pickled: bool) -> str:
        message = (
            f"Cannot decode a request read from Redis key {self.key!r} with "
            f"SCHEDULER_SERIALIZER = {self.serializer!r}: {shorten(exc)}."
        )
        if pickled:
            message += (
                " It looks like pickle data, as written by the original scrapy-redis. To read "
                "it set SCHEDULER_SERIALIZER = 'scrapy_redis.picklecompat' (only if everyone "
                "who can write to this Redis is trusted), or delete the key."
            )
        return message

    def __len__(self) -> int:
        raise NotImplementedError

    def push(self, request: Request) -> None:
        """Add ``request``; UnserializableRequestError if it cannot be stored."""
        self.push_entries([self.encode(request)])

    def encode(self, request: Request) -> Entry:
        """The entry stored for ``request``, or UnserializableRequestError (nothing is sent)."""
        return Entry(self._encode_request(request), request.priority)

    def pop(self, timeout: int = 0) -> Request | None:
        """Take the next request, or ``None``.

        A ``timeout`` > 0 blocks (``BRPOP``/``BLPOP``) that many seconds on the list
        queues: never do that on Twisted's reactor thread (the scheduler does not).
        """
        for entry in self.pop_entries(1, timeout):
            return self.decode_entry(entry)
        return None

    def decode(self, entry: Entry) -> Request:
        """The request of ``entry``, or UndecodableRequestError (nothing else happens)."""
        return self._decode_request(entry.data)

    def decode_entry(self, entry: Entry) -> Request:
        """The request of ``entry``, or UndecodableRequestError.

        An entry that looks like pickle (wrong SCHEDULER_SERIALIZER) is put back
        where it was; any other undecodable entry is moved to ``<key>:invalid``.
        Neither is deleted.
        """
        try:
            return self.decode(entry)
        except UndecodableRequestError as exc:
            if exc.looks_like_pickle:
                self.restore_entries([entry])
            else:
                self.server.rpush(invalid_entries_key(self.key), entry.data)
            raise

    def is_empty(self) -> bool:
        return not self.server.exists(self.key)

    def clear(self) -> None:
        """Delete every request of the queue (``UNLINK``: the server frees memory lazily)."""
        self.server.unlink(*self.flush_keys())

    def flush_keys(self) -> list[str]:
        """The keys holding the queue's requests."""
        return [self.key]

    def push_entries(self, entries: Sequence[Entry]) -> None:
        raise NotImplementedError

    def push_new(
        self,
        candidates: Sequence[Candidate],
        seen_key: str,
        news: str = "",
        write: int | None = None,
    ) -> list[bool]:
        """Record the fingerprints in the set ``seen_key`` and push the new requests.

        Returns, per candidate, whether it was new (a duplicate is not pushed).
        The script path publishes on the channel ``news`` (if given) when it
        pushed requests, which wakes idle workers at once.
        Our queues do it atomically in one script call when the set and the queue
        may be used by one script (always, except on a Redis Cluster without a
        shared hash tag), numbered ``write`` (default: the next of ``self.writes``):
        a call sent again with the same number, the same candidates, is answered
        what the first was, and writes nothing. Otherwise this one pipeline of
        ``SADD`` then one push: a worker dying in between loses the batch's new
        requests, and a pipeline redis-py sends again finds them all duplicates.
        """
        checked = [c for c in candidates if c.fingerprint is not None]
        added: list[int] = []
        if checked:
            pipe = self.server.pipeline(transaction=False)
            for candidate in checked:
                pipe.sadd(seen_key, candidate.fingerprint)
            added = pipe.execute()
        replies = iter(added)
        new = [c.fingerprint is None or next(replies) == 1 for c in candidates]
        entries = [c.entry for c, is_new in zip(candidates, new, strict=True) if is_new]
        self.push_entries([entry for entry in entries if entry is not None])
        return new

    def _scripts_may_use(self, *keys: str) -> bool:
        """Whether one script may touch ``keys`` (on a Redis Cluster: one hash slot)."""
        if not isinstance(self.server, RedisCluster):
            return True
        return len({key_slot(key.encode()) for key in keys}) == 1

    def pop_entries(
        self, count: int, timeout: int = 0, ticket: Ticket | None = None
    ) -> list[Entry]:
        """Take up to ``count`` entries; with a ``ticket``, lease them (see leases.py)."""
        raise NotImplementedError

    def restore_entries(self, entries: Sequence[Entry]) -> None:
        """Put popped ``entries`` (in pop order) back at the head of the queue."""
        raise NotImplementedError


class _ListQueue(Base):
    """A list: LPUSH to add; the subclass picks the end to pop from."""

    _pop_command = ""
    _blocking_pop_command = ""
    #: The Redis type of ``key`` (checked when the scheduler opens).
    redis_type = "list"

    def __len__(self) -> int:
        length: int = self.server.llen(self.key)
        return length

    def push_entries(self, entries: Sequence[Entry]) -> None:
        self._push("LPUSH", [entry.data for entry in entries])

    def _push(self, command: str, datas: list[bytes]) -> None:
        """``command`` (LPUSH or RPUSH) of ``datas``, in calls applied once each."""
        keys = [self.key, self.writes.key(self.key)]
        for start in range(0, len(datas), _PUSH_CHUNK):
            chunk = datas[start : start + _PUSH_CHUNK]
            # The same chunk after a failed call (an outage) is that call sent again.
            args = [command, self.writes.ttl_ms, self.writes.take_for((command, *chunk))]
            script("push_list")(self.server, keys, [*args, *chunk])
            self.writes.confirmed()

    def push_new(
        self,
        candidates: Sequence[Candidate],
        seen_key: str,
        news: str = "",
        write: int | None = None,
    ) -> list[bool]:
        record = self.writes.key(seen_key)
        if not self._scripts_may_use(seen_key, self.key, record):
            return super().push_new(candidates, seen_key)
        if not candidates:
            return []
        batch: list[Any] = []
        for candidate in candidates:
            data = candidate.entry.data if candidate.entry else ""
            batch += [candidate.fingerprint or "", data]
        number = self.writes.take() if write is None else write
        args = [news, _batch_arg(batch), self.writes.ttl_ms, number]
        reply = script("dedup_push_list")(self.server, [seen_key, self.key, record], args)
        return _new_flags(reply, len(candidates))

    def pop_entries(
        self, count: int, timeout: int = 0, ticket: Ticket | None = None
    ) -> list[Entry]:
        if ticket is not None:
            keys = [self.key, ticket.leases_key, ticket.deadlines_key, ticket.deliveries_key]
            release = release_args(ticket.releases)
            args = [self._pop_command, count, ticket.timeout_ms, ticket.id, *release]
            return [
                Entry(data)
                for data in _record_entries(script("lease_list")(self.server, keys, args))
            ]
        if timeout > 0:
            reply = _raw(self.server, self._blocking_pop_command, self.key, timeout)
            return [Entry(reply[1])] if reply else []
        reply = _raw(self.server, self._pop_command, self.key, count)
        return [Entry(data) for data in reply or ()]

    def restore_entries(self, entries: Sequence[Entry]) -> None:
        if entries:
            command = "RPUSH" if self._pop_command == "RPOP" else "LPUSH"
            self._push(command, [entry.data for entry in reversed(entries)])


class FifoQueue(_ListQueue):
    """First in, first out."""

    _pop_command = "RPOP"
    _blocking_pop_command = "BRPOP"


class LifoQueue(_ListQueue):
    """Last in, first out."""

    _pop_command = "LPOP"
    _blocking_pop_command = "BLPOP"


class PriorityQueue(Base):
    """Higher ``request.priority`` first; first in, first out within a priority."""

    # Retries when other workers empty or replace the highest priority meanwhile.
    _POP_ATTEMPTS = 8
    #: The Redis type of ``key``, the index (checked when the scheduler opens).
    redis_type = "zset"

    def __init__(
        self, server: Any, spider: Spider, key: str, serializer: Serializer | Any = None
    ) -> None:
        super().__init__(server, spider, key, serializer)
        self._top = 0  # the priority popped last: usually still the highest

    def __len__(self) -> int:
        members = _raw(self.server, "ZRANGE", self.key, 0, -1)
        priorities = [p for p in map(_priority_of, members) if p is not None]
        legacy = len(members) - len(priorities)
        if not priorities:
            return legacy
        pipe = self.server.pipeline(transaction=False)
        for priority in priorities:
            pipe.llen(priority_list_key(self.key, priority))
        lengths: list[int] = pipe.execute()
        return legacy + sum(lengths)

    def flush_keys(self) -> list[str]:
        members = _raw(self.server, "ZRANGE", self.key, 0, -1)
        lists = [
            priority_list_key(self.key, p) for p in map(_priority_of, members) if p is not None
        ]
        return [self.key, *lists]

    def push_entries(self, entries: Sequence[Entry]) -> None:
        for priority, group in groupby(entries, key=lambda entry: entry.priority):
            self._push_group(priority, [entry.data for entry in group], "back")

    def push_new(
        self,
        candidates: Sequence[Candidate],
        seen_key: str,
        news: str = "",
        write: int | None = None,
    ) -> list[bool]:
        if not candidates:
            return []
        number: dict[int, int] = {}  # priority -> its list's number in the script call
        batch: list[Any] = []
        for candidate in candidates:
            priority = candidate.entry.priority if candidate.entry else 0
            list_number = number.setdefault(priority, len(number) + 1)
            batch += [
                candidate.fingerprint or "",
                list_number,
                candidate.entry.data if candidate.entry else "",
            ]
        lists = [priority_list_key(self.key, priority) for priority in number]
        record = self.writes.key(seen_key)
        if not self._scripts_may_use(seen_key, self.key, record, *lists):
            return super().push_new(candidates, seen_key)
        keys = [seen_key, self.key, record, *lists]
        write = self.writes.take() if write is None else write
        args = [news, len(number), *number, _batch_arg(batch), self.writes.ttl_ms, write]
        reply = script("dedup_push_priority")(self.server, keys, args)
        return _new_flags(reply, len(candidates))

    def _push_group(self, priority: int, datas: list[bytes], where: str) -> None:
        key = priority_list_key(self.key, priority)
        keys = [self.key, key, self.writes.key(key)]
        for start in range(0, len(datas), _PUSH_CHUNK):
            chunk = datas[start : start + _PUSH_CHUNK]
            # The same chunk after a failed call (an outage) is that call sent again.
            number = self.writes.take_for((key, where, *chunk))
            args = [priority, where, self.writes.ttl_ms, number]
            script("push_priority")(self.server, keys, [*args, *chunk])
            self.writes.confirmed()

    def pop_entries(
        self, count: int, timeout: int = 0, ticket: Ticket | None = None
    ) -> list[Entry]:
        lease_keys: list[str] = []
        lease_args: list[Any] = []
        if ticket is not None:
            lease_keys = [ticket.leases_key, ticket.deadlines_key, ticket.deliveries_key]
            lease_args = [ticket.timeout_ms, ticket.id, *release_args(ticket.releases)]
        for _ in range(self._POP_ATTEMPTS):
            keys = [self.key, priority_list_key(self.key, self._top), *lease_keys]
            reply = script("pop_priority")(self.server, keys, [self._top, count, *lease_args])
            if ticket is not None:
                lease_args = lease_args[:2]  # released by this call
            kind = reply[0]
            if kind in (0, 4):  # empty, or only requests this worker must not take now
                return []
            if kind == 3:
                return [Entry(reply[1], legacy_score=reply[2])]
            if kind == 1 and len(reply) > 2:
                return [Entry(data, self._top) for data in _record_entries(reply[2])]
            self._top = int(reply[1]) if kind == 2 else self._top
        return []

    def restore_entries(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            if entry.legacy_score is not None:
                self.server.zadd(self.key, {entry.data: float(entry.legacy_score)})
        ours = [entry for entry in entries if entry.legacy_score is None]
        for priority, group in groupby(reversed(ours), key=lambda entry: entry.priority):
            self._push_group(priority, [entry.data for entry in group], "front")


def _batch_arg(values: list[Any]) -> bytes:
    """A push script's batch as one argument: a msgpack array (str and bytes as msgpack
    strings, which Lua's cmsgpack reads as its strings). One argument for redis-py to
    send and one C call to unpack cost less than an argument per value."""
    packed: bytes = msgpack.packb(values, use_bin_type=False)
    return packed


def _new_flags(reply: bytes | str, count: int) -> list[bool]:
    """A push script's reply, one character per request ("1" new, "0" duplicate)."""
    flags = reply.encode() if isinstance(reply, str) else reply
    if not isinstance(flags, bytes) or len(flags) != count or flags.strip(b"01"):
        raise ValueError(f"unexpected reply from a push script for {count} requests: {reply!r}")
    return [flag == _NEW for flag in flags]


_NEW = ord("1")


def _record_entries(packed: bytes) -> list[bytes]:
    """The entries of the lease record a pop script returned (``b""``: none).

    The record (see leases.py) is packed in one msgpack array: one bulk reply and one
    C call cost less than parsing a reply per entry.
    """
    return msgpack.unpackb(packed, raw=True)[4:] if packed else []


def _priority_of(member: bytes) -> int | None:
    """The priority a PriorityQueue index member stands for; None for an original entry."""
    try:
        text = member.decode("ascii")
    except UnicodeDecodeError:
        return None
    digits = text[1:] if text.startswith("-") else text
    return int(text) if digits.isdigit() else None


def _deprecated_alias(name: str, cls: type[Base]) -> type[Base]:
    """A subclass of ``cls`` that warns when instantiated under its old ``name``."""

    def __init__(self: Base, *args: Any, **kwargs: Any) -> None:
        warnings.warn(
            f"scrapy_redis.queue.{name} is deprecated, use scrapy_redis.queue.{cls.__name__}",
            ScrapyRedisDeprecationWarning,
            stacklevel=2,
        )
        cls.__init__(self, *args, **kwargs)

    return type(name, (cls,), {"__init__": __init__, "__doc__": f"Deprecated: {cls.__name__}."})


SpiderQueue = _deprecated_alias("SpiderQueue", FifoQueue)
SpiderStack = _deprecated_alias("SpiderStack", LifoQueue)
SpiderPriorityQueue = _deprecated_alias("SpiderPriorityQueue", PriorityQueue)

__all__ = [
    "Base",
    "Candidate",
    "Entry",
    "FifoQueue",
    "LifoQueue",
    "PriorityQueue",
    "SpiderPriorityQueue",
    "SpiderQueue",
    "SpiderStack",
]
