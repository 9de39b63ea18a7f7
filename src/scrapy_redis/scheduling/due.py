"""Requests due later (issue 27.2): a request with ``meta["due_in"]`` (seconds) waits in
Redis, leased by no one, until it is due by the Redis server's clock, then joins the queue
in its priority.

The scheduler checks its fingerprint as for any request (unless ``dont_filter``), then
puts it in ``<queue key>:due``, a sorted set scored by when it is due (``due_add.lua``:
the server adds the delay to its own clock). Every worker moves what is due into the queue
(``due_promote.lua``: each request once, atomically, and the idle workers are told) every
:data:`POLL` seconds, when it finds the queue empty (as often at most), and on its
heartbeat. A crawl with requests due within MAX_IDLE_TIME_BEFORE_CLOSE is
not idle. Our queue classes only (FifoQueue, LifoQueue, PriorityQueue; a split crawl's
first lane). Queued per download slot (SCHEDULER_FLEET_LIMITS), a member also holds the
request's slot, and a due request joins its slot's queue (``due_promote_slots.lua``)
under the slot's limits; a split crawl keeps them per lane (a slot is in one lane).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgpack  # type: ignore[import-untyped]
from twisted.internet import task

from scrapy_redis.exceptions import UnserializableRequestError
from scrapy_redis.queues.base import Candidate, Entry
from scrapy_redis.queues.lists import _ListQueue
from scrapy_redis.queues.priority import PriorityQueue
from scrapy_redis.scheduling.lanes import lane_of
from scrapy_redis.store.keys import due_key, invalid_entries_key, priority_list_key
from scrapy_redis.store.scripts import ScriptCall, run_pipelined, script

if TYPE_CHECKING:
    from scrapy import Request

logger = logging.getLogger(__name__)

#: The ``Request.meta`` key: in how many seconds the request may be fetched.
META_KEY = "due_in"
#: Most seconds between two looks at the requests due, while the queue is empty.
POLL = 1.0
#: Requests due moved per call.
BATCH = 100


def fetch_later(request: Request, seconds: float, dont_filter: bool = True) -> Request:
    """``request`` to be fetched no sooner than ``seconds`` from when it is scheduled (by
    the Redis server's clock). ``dont_filter`` (default) lets a page already crawled be
    fetched again (a revisit, a retry)."""
    meta = {**request.meta, META_KEY: float(seconds)}
    return request.replace(meta=meta, dont_filter=dont_filter or request.dont_filter)


class DueRequests:
    """One scheduler's requests due later, on ``queue`` (see the module)."""

    def __init__(
        self, queues: list[Any], filters: list[Any], news: str, clock: Callable[[], float]
    ) -> None:
        #: The queues keeping requests due later: one, or every lane queued per slot.
        self.queues = queues
        self.queue = queues[0]
        #: The crawl's filter, or its lanes' (a fingerprint is checked in its lane's).
        self.filters = filters
        self.server = self.queue.server
        #: Each queue's ``<queue key>:due``.
        self.keys = [due_key(queue.key, queue.on_cluster) for queue in queues]
        self.key = self.keys[0]
        self.news = [tuple(queue.news_args(news)) for queue in queues]
        self.per_slot = bool(getattr(self.queue, "paced_by_the_fleet", False))
        self.clock = clock
        self._looked = clock()  # the first look a poll from now (not in every short run)
        self._loop: task.LoopingCall | None = None

    def start(self, reactor: Any, run: Callable[[Callable[[], int], int], int]) -> None:
        """Look every :data:`POLL` seconds on ``reactor``, through ``run(call, default)``
        (the outage guard): a request is moved when due, even while this worker idles
        (the move tells the idle workers)."""
        self._loop = task.LoopingCall(lambda: run(lambda: self.promote(now=True), 0))
        self._loop.clock = reactor
        self._loop.start(POLL, now=False)

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    @staticmethod
    def wants(request: Request) -> bool:
        return META_KEY in request.meta

    def add(self, request: Request) -> bool | None:
        """Put ``request`` aside until it is due; False if it is a duplicate; None if the
        serializer refuses it (the caller takes it as a request due now)."""
        try:
            entry = self.queue.encode(request)
        except UnserializableRequestError:
            return None
        if not request.dont_filter:
            dupefilter = self._filter_of(request, entry)
            if dupefilter.request_seen(request):
                dupefilter.log(request, self.queue.spider)
                return False
        delay_ms = max(0, round(float(request.meta[META_KEY]) * 1000))
        fields = [entry.priority, random.getrandbits(62), entry.data]
        if entry.slot is not None:  # queued per download slot: it keeps its slot
            fields.append(entry.slot)
        member = msgpack.packb(fields, use_bin_type=False)
        lane = lane_of(Candidate(None, entry), len(self.queues)) if self.per_slot else 0
        script("due_add")(self.server, [self.keys[lane]], [delay_ms, member])
        self._looked = -POLL  # look again soon: it may be due at once
        return True

    def _filter_of(self, request: Request, entry: Any) -> Any:
        if len(self.filters) == 1:
            return self.filters[0]
        fingerprint = self.filters[0].request_fingerprint(request)
        return self.filters[lane_of(Candidate(fingerprint, entry), len(self.filters))]

    def promote(self, now: bool = False) -> int:
        """Move what is due into the queue (at most every :data:`POLL` seconds unless
        ``now``); how many requests were moved. Every lane is looked at in one pipeline,
        and what is due moved in a second (on a Redis Cluster: one round trip per master
        each), each lane's move one script call (atomic)."""
        if not now and self.clock() - self._looked < POLL:
            return 0
        self._looked = self.clock()
        looks = [(script("due_ready"), [key], [BATCH, 0]) for key in self.keys]
        asides: list[ScriptCall] = []
        moves: list[ScriptCall] = []
        for lane, (members, _) in enumerate(run_pipelined(self.server, looks)):
            readable = [member for member in members if _readable(member)]
            if len(readable) < len(members):
                asides.append(self._set_aside(lane, [m for m in members if m not in readable]))
            if readable:
                moves.append(self._move_call(lane, readable))
        replies = run_pipelined(self.server, asides + moves)
        return sum(int(reply) for reply in replies[len(asides) :])

    def _set_aside(self, lane: int, members: list[bytes]) -> ScriptCall:
        """The call putting members that are not requests due later (read from Redis:
        anyone may write there) into the queue's entries set aside (``due_set_aside.lua``)."""
        queue = self.queues[lane]
        invalid = invalid_entries_key(queue.key, queue.on_cluster)
        logger.warning(
            "%(count)d entries of %(key)s are not requests due later: set aside in "
            "%(invalid)s (scrapy redis requeue --invalid puts them in the queue)",
            {"count": len(members), "key": self.keys[lane], "invalid": invalid},
            extra={"spider": queue.spider},
        )
        return script("due_set_aside"), [self.keys[lane], invalid], list(members)

    def _move(self, lane: int, members: list[bytes]) -> Any:
        """Move the due ``members`` of ``lane`` into its queue: how many were moved."""
        lua, keys, args = self._move_call(lane, members)
        return lua(self.server, keys, args)

    def _move_call(self, lane: int, members: list[bytes]) -> ScriptCall:
        """The script call moving the due ``members`` of ``lane`` into its queue."""
        queue, key, news = self.queues[lane], self.keys[lane], self.news[lane]
        invalid = invalid_entries_key(queue.key, queue.on_cluster)
        if self.per_slot:
            return self._to_slots_call(queue, [key, *queue.slot_keys, invalid], news, members)
        if not isinstance(queue, PriorityQueue):
            args = [part for member in members for part in (member, 0)]
            return script("due_promote"), [key, queue.key, invalid], ["list", *news, *args]
        lists: dict[int, int] = {}
        args = []
        for member in members:
            priority = int(msgpack.unpackb(member, raw=True)[0])
            args += [member, lists.setdefault(priority, len(lists) + 1)]
        keys = [key, queue.key, invalid]
        keys += [priority_list_key(queue.key, p, queue.on_cluster) for p in lists]
        return script("due_promote"), keys, ["priority", *news, *args]

    @staticmethod
    def _to_slots_call(
        queue: Any, keys: list[str], news: tuple[str, ...], members: list[bytes]
    ) -> ScriptCall:
        """Due members into their slots' queues (``due_promote_slots.lua``, ``keys``: the
        due key, the slots' queues', the entries set aside)."""
        args: list[Any] = []
        for member in members:
            args += [member, _slot_of(queue, member)]
        conf = queue._conf({args[i] for i in range(1, len(args), 2)})
        return script("due_promote_slots"), keys, [*news, conf, *args]

    def lane_of_member(self, member: bytes) -> int:
        """The number of the queue (in :attr:`queues`) keeping the due ``member``: its
        slot's lane when queued per slot, else the first (a move, see move_crawl.py; a
        member that is no request due later too: the workers set it aside)."""
        if not self.per_slot or len(self.queues) == 1 or not _readable(member):
            return 0
        slot = _slot_of(self.queue, member)
        return lane_of(Candidate(None, Entry(b"", slot=slot)), len(self.queues))

    def pending_within(self, seconds: float) -> bool:
        """Whether a request is due within ``seconds`` (any, if 0) by the server's clock."""
        window = max(1, round(seconds * 1000)) if seconds else 0
        looks = [(script("due_ready"), [key], [0, window]) for key in self.keys]
        return any(soon for _, soon in run_pipelined(self.server, looks))


def _readable(member: bytes) -> bool:
    """Whether ``member`` is what due_add.lua stores: msgpack {priority, a random
    number, the serialized request[, its slot]}, and nothing Redis' cmsgpack cannot read
    (an ExtType, anywhere: due_promote*.lua would set it aside too, see _due.lua)."""
    try:
        fields = msgpack.unpackb(member, raw=True, ext_hook=_no_ext, timestamp=0)
    except Exception:  # untrusted data: any error of the parser
        return False
    if not isinstance(fields, list) or len(fields) not in (3, 4):
        return False
    if not all(_is_integer(field) for field in fields[:2]) or abs(fields[0]) >= 2**47:
        return False  # (beyond 2^47, Lua's numbers would not name its list exactly)
    return all(isinstance(field, bytes) for field in fields[2:])


def _no_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"msgpack ExtType {code}: Redis' cmsgpack cannot read it")


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _slot_of(queue: Any, member: bytes) -> str:
    """The download slot of a due member: the one it holds, else (put aside without
    fleet-wide limits) its request's, or "" for a request that cannot be read (its pop
    sets it aside as any undecodable entry)."""
    fields = msgpack.unpackb(member, raw=True)
    if len(fields) > 3 and isinstance(fields[3], bytes):
        return str(fields[3].decode("utf-8", "replace"))
    try:
        return str(queue.limits.slot_of(queue._decode_request(fields[2])))
    except Exception:  # untrusted data: never stops the others
        return ""


def due_requests(
    queue: Any, dupefilter: Any, news: str, clock: Callable[[], float]
) -> DueRequests | None:
    """The requests due later of ``queue`` (a split crawl's: its first lane's), checked
    with ``dupefilter`` (or the lanes'); None for a queue class of one's own."""
    lanes = list(getattr(queue, "lanes", None) or [queue])
    if getattr(lanes[0], "paced_by_the_fleet", False):  # per slot: a slot in one lane
        targets = lanes
    elif isinstance(lanes[0], (_ListQueue, PriorityQueue)):
        targets = lanes[:1]
    else:
        return None
    filters = list(getattr(queue, "filters", None) or [dupefilter])
    return DueRequests(targets, filters, news, clock)
