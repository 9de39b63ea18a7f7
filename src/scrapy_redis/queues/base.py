"""What every request queue is: :class:`Base`, the entries it stores and the push scripts'
arguments and replies. The queues themselves are in :mod:`scrapy_redis.queue`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import msgpack  # type: ignore[import-untyped]
from redis.client import NEVER_DECODE

from scrapy_redis import defaults
from scrapy_redis.connection import is_cluster, one_slot
from scrapy_redis.core.compat import PerInstance
from scrapy_redis.encoding.codec import decode_request, encode_request
from scrapy_redis.exceptions import ScrapyRedisError, UndecodableRequestError
from scrapy_redis.queues.leases import Ticket
from scrapy_redis.queues.seen_sets import BitFilter, SeenMembers, SetFilter, single_set
from scrapy_redis.serializers import Serializer, resolve_serializer
from scrapy_redis.store.keys import format_key, invalid_entries_key, needs_formatting, news_channel
from scrapy_redis.store.writes import WriteIds

if TYPE_CHECKING:
    from scrapy import Request, Spider

#: Lua's unpack() is limited to a few thousand values: larger pushes are split.
PUSH_CHUNK = 1000


# Entries and candidates are made once per request: not frozen, which costs three times
# as much to build. Neither is changed once made (hashed by value, as when frozen).
@dataclass(slots=True, unsafe_hash=True)
class Entry:
    """A serialized request as stored in Redis, with what is needed to put it back."""

    data: bytes
    priority: int = 0
    #: The sorted-set score of an entry written by the original PriorityQueue.
    legacy_score: bytes | None = None
    #: Its download slot, when queued per slot (scrapy_redis.politeness); None otherwise.
    slot: str | None = None


@dataclass(slots=True, unsafe_hash=True)
class Candidate:
    """A request offered to :meth:`Base.push_new`."""

    #: Its fingerprint; None for a ``dont_filter`` request (neither checked nor recorded).
    fingerprint: str | None
    #: What to store; None to record the fingerprint only (the caller keeps the request).
    entry: Entry | None
    #: How long its fingerprint is kept, in ms (0: forever), if the filter's expire.
    lifetime_ms: int = 0


def seen_tokens(
    seen: str | SetFilter, candidates: Sequence[Candidate]
) -> tuple[SeenMembers, list[tuple[int, str | int]]]:
    """Where ``candidates`` are recorded, and per candidate ``(set number, member)`` for a
    push script: the set's 1-based number in ``keys``, or ``(0, "")`` for a dont_filter
    candidate (neither checked nor recorded)."""
    fingerprints = [c.fingerprint for c in candidates if c.fingerprint is not None]
    if isinstance(seen, str):
        members = single_set(seen, fingerprints)
    else:
        members = seen.seen_members(fingerprints)
    placed = iter(members.members)
    tokens: list[tuple[int, str | int]] = []
    for candidate in candidates:
        if candidate.fingerprint is None:
            tokens.append((0, ""))
        else:
            index, member = next(placed)
            tokens.append((index + 1, member))
    return members, tokens


def counter_keys(members: SeenMembers) -> list[str]:
    """The count hash of ``members``, as a list of keys (empty: no count kept)."""
    return [members.counter] if members.counter is not None else []


#: Where a push script's fingerprints go: a set key, a filter of sets or a Bloom filter.
Seen = str | SetFilter | BitFilter


@dataclass(slots=True)
class FilterArgs:
    """The duplicate filter's part of a push script call (see open_filter() in
    ``lua/_dedup.lua``)."""

    #: The key the filter is known by: the record of the queue's writes is named after it.
    base: str
    #: The filter's keys, after the queue's.
    keys: list[str]
    #: The script's arguments from the filter's mode on.
    args: list[Any]
    #: Per candidate, ``(set number, member)`` (see :func:`seen_tokens`).
    tokens: list[tuple[int, str | int]]
    #: A Bloom filter: it may answer for the first candidates only, or "stale".
    bits: BitFilter | None = None


def filter_args(seen: Seen, candidates: Sequence[Candidate]) -> FilterArgs | None:
    """The filter's part of a push script call for ``candidates``; None if the filter is
    not checked in a script."""
    if getattr(seen, "expiry", None) is not None:  # lua/_expiry.lua, _(lean|bloom)_expiry.lua
        expiring = seen.expiring_members(candidates)  # type: ignore[union-attr]
        given = iter(expiring.members)
        tokens = [(0, "") if c.fingerprint is None else (1, next(given)) for c in candidates]
        return FilterArgs(expiring.base, expiring.keys, expiring.args, tokens)
    if isinstance(seen, BitFilter):
        fingerprints = [c.fingerprint for c in candidates if c.fingerprint is not None]
        bits = seen.seen_bits(fingerprints)
        if bits is None:
            return None
        given = iter(bits.members)
        tokens: list[tuple[int, str | int]] = [
            (0, "") if c.fingerprint is None else (1, next(given)) for c in candidates
        ]
        return FilterArgs(bits.base, bits.keys, [bits.mode, *bits.args], tokens, seen)
    members, tokens = seen_tokens(seen, candidates)
    counters = counter_keys(members)
    return FilterArgs(members.base, [*members.keys, *counters], ["1" if counters else "0"], tokens)


#: How often a push is sent again to a Bloom filter that keeps changing its layers.
_STALE_TRIES = 64


def send_push(
    seen: Seen,
    candidates: Sequence[Candidate],
    first: FilterArgs,
    send: Callable[[FilterArgs], Any],
) -> list[bool]:
    """``send(args)`` (one push script call) and its flags; a filter found changed since
    ``first`` was made (a Bloom filter's layers, a lean filter's generations) is looked at
    again and the call sent again (nothing was written). The flags may be for the first
    candidates only (see :meth:`Base.push_new`)."""
    args = first
    for _ in range(_STALE_TRIES):
        reply = send(args)
        if reply not in (b"stale", "stale"):
            if args.bits is None:
                return new_flags(reply, len(candidates))
            flags = new_flags(reply, len(candidates), prefix=True)
            args.bits.bits_answered(len(flags), len(candidates))
            return flags
        stale = args.bits.bits_stale if args.bits else seen.expiry_stale  # type: ignore[union-attr]
        stale()
        again = filter_args(seen, candidates)
        assert again is not None  # the filter was checked in a script a moment ago
        args = again
    raise ScrapyRedisError(f"The filter {args.base} keeps changing its layers or generations.")


def check_outside_script(
    server: Any, seen: Seen, fingerprints: Sequence[str], lifetimes: Sequence[int] = ()
) -> list[bool]:
    """Record ``fingerprints`` without a push script (a Redis Cluster whose keys are in
    several slots, a RedisBloom filter): whether each is new. A Bloom filter's own call,
    an expiring filter's (with ``lifetimes``, ms), or one pipeline of ``SADD`` (and the
    count the filter keeps)."""
    if getattr(seen, "expiry", None) is not None:
        return [not was_seen for was_seen in seen.seen_expiring(fingerprints, lifetimes)]
    if isinstance(seen, BitFilter):
        return [not was_seen for was_seen in seen.seen_many(fingerprints)]
    members = (
        single_set(seen, fingerprints) if isinstance(seen, str) else seen.seen_members(fingerprints)
    )
    if not fingerprints:
        return []
    pipe = server.pipeline(transaction=False)
    for index, member in members.members:
        pipe.sadd(members.keys[index], member)
    added = [int(reply) == 1 for reply in pipe.execute()]
    if members.counter is not None and any(added):
        server.hincrby(members.counter, "count", sum(added))
    return added


def lifetimes(candidates: Sequence[Candidate]) -> list[int]:
    """The lifetimes (ms) of the candidates that have a fingerprint, in order."""
    return [c.lifetime_ms for c in candidates if c.fingerprint is not None]


def raw_command(server: Any, *args: Any) -> Any:
    """``server.execute_command(*args)``, its reply never decoded (binary entries)."""
    return server.execute_command(*args, **{NEVER_DECODE: True})


class Base:
    """Common code of the queues, and the two contracts they keep:

    * the original's, for Scrapy and queue classes of their own: ``push()``, ``pop()``,
      ``__len__()``, ``clear()``, with ``_encode_request()`` / ``_decode_request()``
      (the codec, :mod:`scrapy_redis.encoding.codec`);
    * the batches the scheduler sends and takes: :meth:`push_new` (with the
      fingerprints), :meth:`pop_entries` (leased with a ticket, see
      :mod:`scrapy_redis.queues.leases`) and :meth:`restore_entries`, over :class:`Entry`.

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
        """The bytes stored for ``request``; UnserializableRequestError with the reason
        (see :mod:`scrapy_redis.encoding.codec`)."""
        return encode_request(request, self.spider, self.serializer)

    def _decode_request(self, encoded: bytes) -> Request:
        """The request stored as ``encoded``; UndecodableRequestError with the fix
        (see :mod:`scrapy_redis.encoding.codec`)."""
        return decode_request(encoded, self.spider, self.serializer, self.key)

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
                self.server.rpush(invalid_entries_key(self.key, self.on_cluster), entry.data)
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
        seen: Seen,
        news: str = "",
        write: int | None = None,
    ) -> list[bool]:
        """Record the fingerprints and push the new requests.

        ``seen`` is where fingerprints are recorded: the key of one set, a filter
        naming a set per fingerprint, or a Bloom filter (see :mod:`scrapy_redis.queues.seen_sets`).
        Returns, per candidate, whether it was new (a duplicate is not pushed); with a
        Bloom filter, possibly for the first candidates only (its newest layer filled:
        the caller sends the others again, in another call). The script path
        publishes on the channel ``news`` (if given; on a Redis Cluster this queue's
        own sharded channel: :meth:`news_args`) when it pushed requests, which wakes
        idle workers at once.
        Our queues do it atomically in one script call when the sets and the queue
        may be used by one script (always, except on a Redis Cluster without a
        shared hash tag), numbered ``write`` (default: the next of ``self.writes``):
        a call sent again with the same number, the same candidates, is answered
        what the first was, and writes nothing. Otherwise this one pipeline of
        ``SADD`` then one push: a worker dying in between loses the batch's new
        requests, and a pipeline redis-py sends again finds them all duplicates
        (a Bloom filter: its own check-and-record call, then the push). The same
        write sent again after its push failed (an outage) is not checked again:
        its answers are kept, and its new requests pushed.
        """
        fingerprints = tuple(c.fingerprint for c in candidates if c.fingerprint is not None)
        remembered = getattr(self, "_checked_outside", None)
        if write is not None and remembered is not None and remembered[0] == (write, fingerprints):
            fresh = remembered[1]  # checked by this write before its push failed: not again
        else:
            fresh = check_outside_script(self.server, seen, fingerprints, lifetimes(candidates))
            self._checked_outside = ((write, fingerprints), fresh)
        answers = iter(fresh)
        new = [c.fingerprint is None or next(answers) for c in candidates]
        entries = [c.entry for c, is_new in zip(candidates, new, strict=True) if is_new]
        self.push_entries([entry for entry in entries if entry is not None])
        return new

    @property
    def on_cluster(self) -> bool:
        """Whether the queue is on a Redis Cluster (its derived keys in its slot: keys.py)."""
        return is_cluster(self.server)

    def news_args(self, news: str) -> list[str]:
        """The push scripts' news arguments: the channel and how to publish there. On one
        Redis ``news`` (``""``: nobody to tell) with ``PUBLISH``. On a Redis Cluster,
        unless ``news`` is ``""``, this queue's own sharded channel with ``SPUBLISH``
        (:func:`~scrapy_redis.store.keys.news_channel`): a script may only publish in the slot
        of its keys, so each lane of a split crawl announces on its own channel (workers
        listen to every lane's)."""
        if not news or not self.on_cluster:
            return [news, "PUBLISH"]
        return [news_channel(self.key, cluster=True), "SPUBLISH"]

    def scripts_may_use(self, *keys: str) -> bool:
        """Whether one script may touch ``keys`` (on a Redis Cluster: one hash slot); if
        not, :meth:`push_new` takes the pipeline path (a hook: tests replace it to take
        that path without a cluster)."""
        return one_slot(self.server, keys)

    def pop_entries(
        self, count: int, timeout: int = 0, ticket: Ticket | None = None
    ) -> list[Entry]:
        """Take up to ``count`` entries; with a ``ticket``, lease them (see leases.py)."""
        raise NotImplementedError

    def restore_entries(self, entries: Sequence[Entry]) -> None:
        """Put popped ``entries`` (in pop order) back at the head of the queue."""
        raise NotImplementedError


def batch_arg(values: list[Any]) -> bytes:
    """A push script's batch as one argument: a msgpack array (str and bytes as msgpack
    strings, which Lua's cmsgpack reads as its strings). One argument for redis-py to
    send and one C call to unpack cost less than an argument per value."""
    packed: bytes = msgpack.packb(values, use_bin_type=False)
    return packed


def new_flags(reply: bytes | str, count: int, prefix: bool = False) -> list[bool]:
    """A push script's reply, one character per request ("1" new, "0" duplicate); with
    ``prefix``, for at least the first of them."""
    flags = reply.encode() if isinstance(reply, str) else reply
    if (
        not isinstance(flags, bytes)
        or flags.strip(b"01")
        or not (0 < len(flags) <= count if prefix else len(flags) == count)
    ):
        raise ValueError(f"unexpected reply from a push script for {count} requests: {reply!r}")
    return [flag == _NEW for flag in flags]


_NEW = ord("1")
