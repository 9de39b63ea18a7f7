"""``SlotQueue``: requests queued per download slot, taken under fleet-wide limits.

Every queued request is named ``<slot> NUL <priority> <sequence> <request>`` (its member)
so that one slot's requests are a lexicographic range, most urgent first: a member of
one sorted set, ``<queue key>:polite:pq``, while its slot has few requests of its
priority, else an element ``<sequence> <request>`` of that slot and priority's list
(``:polite:q:<slot> NUL <priority>``, named in ``pq`` by ``<slot> NUL <priority>``: see
``lua/_slot_store.lua``); the slots that may start a download now are a heap of their
most urgent request (``:polite:ready``), those that must wait a heap
of the time they may (``:polite:waiting``), each slot's delay, concurrency, next start
and downloads in flight a field of ``:polite:slots``. The scripts (``lua/_slots.lua``,
``pop_slots.lua``, ``push_slots.lua``, ``dedup_push_slots.lua``) keep them on the Redis
server's clock; see docs/politeness.rst.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from scrapy_redis.politeness.corrupt import CorruptValues, Sweeper
from scrapy_redis.politeness.limits import SlotLimits, Throttle, fleet_early
from scrapy_redis.queues.base import (
    PUSH_CHUNK,
    Base,
    Candidate,
    Entry,
    FilterArgs,
    Seen,
    batch_arg,
    filter_args,
    send_push,
)
from scrapy_redis.queues.leases import Ticket, release_args
from scrapy_redis.queues.records import record_entries
from scrapy_redis.serializers import Serializer
from scrapy_redis.store.keys import slot_list_key, slot_queue_keys, slot_store_keys
from scrapy_redis.store.redis_values import count_or_zero
from scrapy_redis.store.scripts import script

if TYPE_CHECKING:
    from scrapy import Request, Spider

import msgpack  # type: ignore[import-untyped]

#: Characters of a member between the slot's NUL and the request (priority, sequence).
_PREFIX = 24


def member_request(member: bytes) -> bytes:
    """The serialized request of a queued member (one without NUL, not ours: itself)."""
    zero = member.find(b"\0")
    return member if zero < 0 else member[zero + 1 + _PREFIX :]


def member_id(member: bytes) -> str:
    """The id of a queued member (its priority and sequence: 24 hex digits, unique)."""
    at = member.find(b"\0") + 1
    return member[at : at + _PREFIX].decode("ascii", "replace") if at else ""


def member_slot(member: bytes) -> str:
    """The download slot of a queued member (one without NUL: itself)."""
    zero = member.find(b"\0")
    return member[: zero if zero >= 0 else None].decode("utf-8", "replace")


#: The requests of one slot and priority that make a list (LIST_FROM in lua/_slot_store.lua).
LIST_FROM = 4
#: Members or list elements read per command by :func:`queued_members`.
READ_CHUNK = 1000


def queued_members(server: Any, queue_key: str, cluster: bool = False) -> Iterator[bytes]:
    """Every member queued per slot under ``queue_key``, slot by slot, each slot's in its
    pop order (priority, then sequence): ``pq`` in order, a list's requests in the place
    of the group that points to it (see lua/_slot_store.lua). Read a chunk at a time, not
    atomically (a crawl running meanwhile may move some)."""
    pq = slot_queue_keys(queue_key, cluster)[0]
    for entry in _chunks(lambda at: server.zrange(pq, at, at + READ_CHUNK - 1)):
        listed: Iterator[bytes] = iter(())
        if len(entry) == entry.find(b"\0") + 13:  # a group: its list's requests
            key = slot_list_key(queue_key, entry, cluster)
            listed = _chunks(lambda at, key=key: server.lrange(key, at, at + READ_CHUNK - 1))
        found = False
        for element in listed:  # (6 bytes of sequence: 12 hex)
            found = True
            yield entry + element[:6].hex().encode() + element[6:]
        if not found:
            yield entry


def _chunks(read: Callable[[int], list[bytes]]) -> Iterator[bytes]:
    at = 0
    while True:
        chunk = read(at)
        yield from chunk
        if len(chunk) < READ_CHUNK:
            return
        at += READ_CHUNK


def _settings_of(crawler: Any) -> Any:
    """The crawler's settings, or Scrapy's defaults (a queue built without a crawler)."""
    settings = crawler.settings if crawler is not None else None
    if settings is None:
        from scrapy.settings import Settings

        settings = Settings()
    return settings


class Member(Entry):
    """A popped entry of the per-slot queues: its data is the whole member (slot,
    priority and sequence before the request), put back as it was."""

    #: When it may start (time.monotonic()), if handed out before its slot's start.
    start_at: float | None = None

    @classmethod
    def of(cls, member: bytes) -> Member:
        return cls(member, slot=member_slot(member))


class SlotQueue(Base):
    """Per-slot queues with fleet-wide limits per download slot (SCHEDULER_FLEET_LIMITS):
    highest priority first, first in first out among equals, among the slots allowed to
    start a download now."""

    uses_leases = True
    uses_push_script = True
    #: The scheduler paces it with :meth:`fleet_pacing` (see scheduling.parts).
    paced_by_the_fleet = True
    #: Its key holds nothing itself: its data is under ``<key>:polite:*``.
    redis_type = None

    @staticmethod
    def fleet_pacing(scheduler: Any, pacer: Any) -> Any:
        """The pacing of a scheduler whose queue (or every lane) is a SlotQueue."""
        from scrapy_redis.politeness.pacing import polite_pacing

        return polite_pacing(scheduler, pacer)

    def __init__(
        self, server: Any, spider: Spider, key: str, serializer: Serializer | Any = None
    ) -> None:
        super().__init__(server, spider, key, serializer)
        crawler = getattr(spider, "crawler", None)
        settings = _settings_of(crawler)
        self.limits = SlotLimits(settings, spider)
        self.slot_keys = slot_queue_keys(self.key, self.on_cluster)
        #: The lists' index and count (lua/_slot_store.lua; not passed to the scripts).
        self.store_keys = slot_store_keys(self.key, self.on_cluster)
        #: Seconds until the earliest slot with requests may start one, after the last
        #: pop that took nothing (None: none may until a download ends, or none queued).
        self.next_start_in: float | None = None
        #: Told the seconds to wait when a pop found slots that must wait (the pacing's hook).
        self.on_wait: Callable[[float | None], object] = lambda seconds: None
        #: Whether the worker reports when a request of a slot with a delay reaches its
        #: downloader (:meth:`started`); the slot waits for it (set by the pacing).
        self.reports_starts = False
        #: Slots popped from whose delay (configured, AutoThrottle's, a robots.txt
        #: Crawl-delay) is not 0: their starts are reported.
        self.delayed_slots: set[str] = set()
        #: Pops take every request, whatever its slot's limits (moving a stopped crawl).
        self.drain = False
        #: How many requests the worker can start now (its downloader's room; set by the
        #: pacing): a pop of more takes the rest only of slots that limit nothing.
        self.room: Callable[[], int] | None = None
        #: Moves requests queued in the layout of SCHEDULER_QUEUE_CLASS here (setup.py).
        self.carry_over: Any = None
        #: Each popped request's id (member_id()), or a robots.txt's own, while alive.
        self.ids: weakref.WeakKeyDictionary[Request, str] = weakref.WeakKeyDictionary()
        #: SCHEDULER_FLEET_EARLY: seconds before its slot's start a request may be taken,
        #: if the worker holds it until then (:attr:`holds`, set by the pacing).
        self.early = fleet_early(settings)
        self.holds: Callable[[], bool] = lambda: False
        #: Decoded requests: when each may start (time.monotonic(); after the reply: early).
        self.start_at: weakref.WeakKeyDictionary[Request, float] = weakref.WeakKeyDictionary()
        #: Logs and counts the bad values in its keys that the scripts replaced.
        self.corrupt = CorruptValues(self.key, self.on_cluster, getattr(crawler, "stats", None))
        self.sweeper = Sweeper(self.server, self.key, self.on_cluster)

    # -- the original's contract --------------------------------------------------------

    def __len__(self) -> int:
        pipe = self.server.pipeline(transaction=False)
        pipe.zcard(self.slot_keys[0])
        pipe.get(self.store_keys[1])
        inline, listed = pipe.execute()
        return int(inline) + count_or_zero(listed)

    def is_empty(self) -> bool:
        return not self.server.exists(self.slot_keys[0], self.store_keys[0])

    def key_types(self) -> list[tuple[str, str]]:
        """Its keys whose type the scripts need, with it (see store/keytypes.py): the
        others (seq, more, corrupt) are replaced when bad, the lists not listed."""
        pq, ready, waiting, slots, _ = self.slot_keys
        kinds = [(pq, "zset"), (ready, "zset"), (waiting, "zset"), (slots, "hash")]
        return [*kinds, (self.store_keys[0], "zset")]

    def flush_keys(self) -> list[str]:
        """Its keys, with every list its index names."""
        groups = self.server.zrange(self.store_keys[0], 0, -1)
        lists = [slot_list_key(self.key, g, self.on_cluster).decode() for g in groups]
        return [*self.slot_keys, *self.store_keys, *lists]

    def encode(self, request: Request) -> Entry:
        entry = Entry(self._encode_request(request), request.priority)
        entry.slot = self.limits.slot_of(request)
        return entry

    def decode(self, entry: Entry) -> Request:
        if not isinstance(entry, Member):
            return self._decode_request(entry.data)
        request = self._decode_request(member_request(entry.data))
        self.ids[request] = member_id(entry.data)
        if entry.start_at is not None:
            self.start_at[request] = entry.start_at
        return request

    # -- pushing -------------------------------------------------------------------------

    def _conf(self, slots: set[str]) -> bytes:
        packed: bytes = msgpack.packb(
            {slot: self.limits.of(slot).arg() for slot in slots}, use_bin_type=False
        )
        return packed

    def _slot(self, entry: Entry) -> str:
        if entry.slot is None:  # an entry made elsewhere: its slot from the request
            entry.slot = self.limits.slot_of(self._decode_request(entry.data))
        return entry.slot

    def push_entries(self, entries: Sequence[Entry]) -> None:
        members = [entry for entry in entries if isinstance(entry, Member)]
        if members:  # popped from per-slot queues (a move): they keep their member
            self.restore_entries(members)
            entries = [entry for entry in entries if not isinstance(entry, Member)]
        for start in range(0, len(entries), PUSH_CHUNK):
            chunk = entries[start : start + PUSH_CHUNK]
            batch: list[Any] = []
            for entry in chunk:
                batch += [self._slot(entry), entry.priority, entry.data]
            conf = self._conf({batch[i] for i in range(0, len(batch), 3)})
            self._push("new", conf, batch)

    def _push(self, mode: str, conf: bytes, batch: list[Any]) -> None:
        record = self.writes.key(self.slot_keys[0])
        number = self.writes.take_for((mode, *batch))
        keys = [*self.slot_keys, record]
        args = [mode, self.writes.ttl_ms, number, conf, batch_arg(batch)]
        script("push_slots")(self.server, keys, args)
        self.writes.confirmed()

    def restore_entries(self, entries: Sequence[Entry]) -> None:
        members = [entry.data for entry in entries]
        for start in range(0, len(members), PUSH_CHUNK):
            chunk = members[start : start + PUSH_CHUNK]
            self._push("back", self._conf({member_slot(m) for m in chunk}), chunk)

    def push_new(
        self,
        candidates: Sequence[Candidate],
        seen: Seen,
        news: str = "",
        write: int | None = None,
    ) -> list[bool]:
        if not candidates:
            return []
        first = filter_args(seen, candidates)
        if first is None:
            return super().push_new(candidates, seen, news, write)
        record = self.writes.key(first.base)
        if not self.scripts_may_use(*self.slot_keys, record, *first.keys):
            return super().push_new(candidates, seen, news, write)
        write = self.writes.take() if write is None else write
        news_args = self.news_args(news)
        slots = {self._slot(c.entry) for c in candidates if c.entry is not None}
        conf = self._conf(slots)

        def send(filter_part: FilterArgs) -> Any:
            batch: list[Any] = []
            for candidate, token in zip(candidates, filter_part.tokens, strict=True):
                entry = candidate.entry
                if entry is None:
                    batch += [*token, "", 0, ""]
                else:
                    batch += [*token, self._slot(entry), entry.priority, entry.data]
            keys = [*self.slot_keys, record, *filter_part.keys]
            args = [*news_args, batch_arg(batch), conf, self.writes.ttl_ms, write]
            return script("dedup_push_slots")(self.server, keys, [*args, *filter_part.args])

        return send_push(seen, candidates, first, send)

    # -- popping -------------------------------------------------------------------------

    def pop_entries(
        self, count: int, timeout: int = 0, ticket: Ticket | None = None
    ) -> list[Entry]:
        """Up to ``count`` requests of the slots allowed to start one now (``timeout`` is
        ignored: a slot's wait is told to :attr:`on_wait` instead); beyond :attr:`room`,
        only of slots without a delay and far from their concurrency (see pop_slots.lua)."""
        if self.carry_over is not None and self.carry_over.due():
            self.carry_over.move()
        room = count if self.room is None or self.drain else min(count, self.room())
        size = str(count) if room >= count else f"{room}+{count - room}"
        keys, args = list(self.slot_keys[:4]), [size, self._mode()]
        if ticket is not None:
            keys += [ticket.leases_key, ticket.deadlines_key, ticket.deliveries_key]
            args += [ticket.timeout_ms, ticket.id, *release_args(ticket.releases)]
        packed, wait, delayed, *times = script("pop_slots")(self.server, keys, args)
        received = time.monotonic()
        wait = int(wait)
        if len(self.delayed_slots) > 10_000:
            self.delayed_slots.clear()
        self.delayed_slots.update(slot.decode("utf-8", "replace") for slot in delayed)
        self.next_start_in = None if wait < 0 else wait / 1000
        entries = [Member.of(member) for member in record_entries(packed)]
        if len(times) > 2 and times[2]:  # bad values the scripts replaced (see _slots.lua)
            self._replaced(times[2])
        if times:  # (the server's clock, then each request's start on it)
            now, starts = int(times[0]), times[1]
            for entry, start in zip(entries, starts, strict=False):
                # counted from the reply: never before its start (a late one checks it)
                entry.start_at = received + max(0, int(start) - now) / 1000
        if not entries:
            if wait < 0 and self.sweeper.sweep():  # (requests no pop reached: placed)
                self.next_start_in = 0
            self.on_wait(self.next_start_in)
        return list(entries)

    def _replaced(self, reply: list[Any]) -> None:
        """Log and count the bad values a pop reports; the slots whose state was replaced
        get their limits again (push_slots.lua, "back" with no request)."""
        slots = self.corrupt.found(reply)
        for start in range(0, len(slots), PUSH_CHUNK):
            self._push("back", self._conf(set(slots[start : start + PUSH_CHUNK])), [])

    def _mode(self) -> str:
        """The pop script's ARGV[2]: drain, or whether starts are reported, and taken up to
        how many ms early (see pop_slots.lua)."""
        if self.drain:
            return "drain"
        if not self.reports_starts:
            return "0"
        early = round(self.early * 1000)
        return f"1:{early}" if early > 0 and self.holds() else "1"

    def started(self, slot: str, request_id: str | None = None) -> float:
        """A download of ``slot`` (the request of id ``request_id``, :attr:`ids`) left:
        its next start is allowed no earlier than its delay after now; the slot stops
        waiting for the report of its unreported start if it is that request's (or no
        id is given), see ``slot_started.lua``. Seconds until the next start."""
        args = [slot] if request_id is None else [slot, request_id]
        wait = script("slot_started")(self.server, list(self.slot_keys[:4]), args)
        return int(wait) / 1000

    def take_start(
        self, slot: str, request_id: str, held: Sequence[str] = (), ticket: Ticket | None = None
    ) -> float | None:
        """A start of ``slot`` for a request downloaded without the queue (its
        robots.txt), or again for a popped one whose start another used (``slot_take.lua``):
        0 if it may start now (counted), else the seconds to wait before asking again
        (None: the slot is at its concurrency). ``held``: the ids of this worker's popped
        requests of the slot waiting for it, one of which lends its in-flight place (an
        empty list: a popped request's own place); else ``ticket``: a place is leased."""
        limits = self.limits.of(slot)
        keys, args = list(self.slot_keys[:4]), [slot, *limits.arg()]
        args += ["1" if self.reports_starts else "0", request_id]
        if ticket is None:
            args += ["held", *held]
        else:
            keys += [ticket.leases_key, ticket.deadlines_key]
            args += ["place", ticket.timeout_ms, ticket.id]
        wait = int(script("slot_take")(self.server, keys, args))
        return None if wait < 0 else wait / 1000

    def retry_after(self, slot: str, seconds: float) -> None:
        """The site of ``slot`` asked to wait ``seconds`` (a 429 or 503 with Retry-After):
        no worker starts a download of it before then (``slot_feedback.lua``)."""
        args = [slot, "retry_after", int(seconds * 1000)]
        script("slot_feedback")(self.server, list(self.slot_keys[:4]), args)

    def latency(self, slot: str, latency: float, ok: bool, throttle: Throttle) -> float:
        """AutoThrottle for the fleet: a download of ``slot`` took ``latency`` seconds
        (``ok``: status 200); the slot's delay after it, in seconds (-0.001: unknown)."""
        args = [slot, "latency", int(latency * 1000), "1" if ok else "0", *throttle.args()]
        delay = script("slot_feedback")(self.server, list(self.slot_keys[:4]), args)
        return int(delay) / 1000

    def crawl_delay(self, slot: str, seconds: float) -> None:
        """The robots.txt of ``slot``'s site has this Crawl-delay: the least delay of the
        slot for the whole fleet (``slot_feedback.lua``)."""
        args = [slot, "crawl_delay", int(seconds * 1000)]
        script("slot_feedback")(self.server, list(self.slot_keys[:4]), args)
