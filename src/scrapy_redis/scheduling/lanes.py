"""One crawl's queue and duplicate filter split into lanes (SCHEDULER_SHARDS).

On a Redis Cluster every script call must stay in one hash slot, so a crawl
whose queue and filter are one queue and one filter is served by one master.
Split into lanes, each lane is a whole queue and filter of its own (keys under
the lane's hash tag, see :func:`scrapy_redis.store.keys.lane_tags`): a request goes to
the lane its fingerprint picks (:func:`lane_of`), where one script call per
lane checks and pushes a batch, and one per lane pops and leases, as in an
unsplit crawl. The lanes' tags spread over the slot ranges of the masters.

* :class:`LanedQueue` is the scheduler's queue: it sends each lane its part of
  a batch (and answers for the whole batch, in order), counts, clears;
* :class:`LanedFeed` is the scheduler's request feed: one
  :class:`~scrapy_redis.scheduling.leased_feed.LeasedFeed` per lane, taken in turn, a
  leased batch at a time. FIFO (or LIFO, or priority) order holds within a
  lane; across lanes a worker takes a batch (up to SCHEDULER_PREFETCH) of each
  lane in turn, so a request waits behind at most one batch of each other lane,
  whatever its priority.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy_redis.connection import is_cluster
from scrapy_redis.queue import Base, Candidate
from scrapy_redis.scheduling.feeds import queue_has_requests
from scrapy_redis.store.keys import (
    lanes_key,
)
from scrapy_redis.store.outage import OUTAGE_ERRORS

if TYPE_CHECKING:
    from scrapy import Request

    from scrapy_redis.queue import Entry
    from scrapy_redis.scheduling.leased_feed import LeasedFeed
    from scrapy_redis.store.writes import WriteIds

#: How long a lane found empty is tried after the others (seconds).
EMPTY_FOR = 1.0


def lane_of(candidate: Candidate, lanes: int) -> int:
    """The lane of a request: by its fingerprint (a request not filtered, by its entry;
    queued per download slot, by its slot). CRC-32, not the fingerprint's own digits,
    which the filters use for their layouts."""
    entry = candidate.entry
    if entry is not None and entry.slot is not None:  # queued per slot: a slot in one lane
        return zlib.crc32(entry.slot.encode()) % lanes
    token = candidate.fingerprint
    if token is None:
        data = candidate.entry.data if candidate.entry is not None else b""
        return zlib.crc32(data) % lanes
    return zlib.crc32(token.encode()) % lanes


@dataclass
class _Progress:
    """A batch being pushed lane by lane: what each lane answered so far, and the write
    number of the part sent to a lane and not answered (sent again as it was)."""

    write: int
    fingerprints: tuple[str | None, ...]
    answers: dict[int, list[bool]] = field(default_factory=dict)
    numbers: dict[int, int] = field(default_factory=dict)


class LanedQueue:
    """The scheduler's queue split into ``lanes`` (queues of one class), with a filter
    per lane (``filters``; None: the scheduler checks fingerprints outside the script)."""

    def __init__(self, key: str, lanes: Sequence[Base], filters: Sequence[Any]) -> None:
        self.key = key
        self.lanes = list(lanes)
        self.filters = list(filters)
        first = self.lanes[0]
        self.server, self.spider, self.serializer = first.server, first.spider, first.serializer
        self._progress: _Progress | None = None
        self._pops = 0
        #: Sends the lanes' parts of a batch at once (their masters answer in parallel:
        #: a batch costs one round trip, not one per lane); made when first needed.
        self._senders: ThreadPoolExecutor | None = None
        self._take_lock = threading.Lock()
        #: Called with each lane this worker pushed new requests to (the feed's hook:
        #: a lane it found empty is worth a pop again).
        self.on_pushed: Callable[[int], object] = lambda lane: None

    @property
    def writes(self) -> WriteIds:
        return self.lanes[0].writes

    @writes.setter
    def writes(self, writes: WriteIds) -> None:
        for lane in self.lanes:  # one writer: its numbers grow across the lanes' records
            lane.writes = writes

    def encode(self, request: Request) -> Entry:
        return self.lanes[0].encode(request)

    def decode(self, entry: Entry) -> Request:
        return self.lanes[0].decode(entry)

    def __len__(self) -> int:
        return sum(len(lane) for lane in self.lanes)

    def is_empty(self, first: int = 0) -> bool:
        """Whether no lane holds requests (``first``: the lane asked first, when asked
        one by one)."""
        return not any(self.lanes_holding(first))

    def lanes_holding(self, first: int = 0) -> list[bool]:
        """Per lane, whether it holds requests: one ``EXISTS`` per lane, pipelined (on a
        cluster the masters are asked at once: one round trip). A lane of a class with an
        ``is_empty()`` of its own is asked that, from lane ``first`` on until one holds some."""
        if all(type(lane).is_empty is Base.is_empty for lane in self.lanes):
            pipe = self.server.pipeline(transaction=False)
            for lane in self.lanes:
                pipe.exists(lane.key)
            return [bool(found) for found in pipe.execute()]
        count, holding = len(self.lanes), [False] * len(self.lanes)
        for number in ((first + n) % count for n in range(count)):
            if queue_has_requests(self.lanes[number]):
                holding[number] = True
                break
        return holding

    def clear(self) -> None:
        for lane in self.lanes:
            lane.clear()

    def push(self, request: Request) -> None:
        """The original's API: ``request`` into the lane of its serialized form."""
        entry = self.encode(request)
        self.lanes[lane_of(Candidate(None, entry), len(self.lanes))].push_entries([entry])

    def pop(self, timeout: int = 0) -> Request | None:
        """The original's API: the next request of the lanes, taken in turn (not leased)."""
        for step in range(len(self.lanes)):
            lane = self.lanes[(self._pops + step) % len(self.lanes)]
            request = lane.pop(timeout)
            if request is not None:
                self._pops += step + 1
                return request
        return None

    def push_new(
        self,
        candidates: Sequence[Candidate],
        seen: Any,
        news: str = "",
        write: int | None = None,
    ) -> list[bool]:
        """Each lane's part of the batch, checked and pushed by one call to that lane;
        whether each candidate was new, in batch order. A lane answering for part of its
        requests (a Bloom filter's layer filled) is sent the rest at once, as a write of
        its own. Sent again after a failure (``write`` and the candidates as before), the
        lanes that answered are not sent again, and the others are sent as they were."""
        number = self.writes.take() if write is None else write
        progress = self._progress_for(number, candidates)
        groups = self._groups(candidates)
        parts = {lane: [candidates[i] for i in indexes] for lane, indexes in groups.items()}
        self._push_lanes(parts, progress, news)
        self._progress = None
        new = [False] * len(candidates)
        for lane, indexes in groups.items():
            pushed = False
            for index, is_new in zip(indexes, progress.answers[lane], strict=True):
                new[index] = is_new
                pushed = pushed or (is_new and candidates[index].entry is not None)
            if pushed:
                self.on_pushed(lane)
        return new

    def _progress_for(self, write: int, candidates: Sequence[Candidate]) -> _Progress:
        fingerprints = tuple(c.fingerprint for c in candidates)
        progress = self._progress
        if progress is None or (progress.write, progress.fingerprints) != (write, fingerprints):
            progress = self._progress = _Progress(write, fingerprints)
        return progress

    def _groups(self, candidates: Sequence[Candidate]) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = {}
        for index, candidate in enumerate(candidates):
            groups.setdefault(lane_of(candidate, len(self.lanes)), []).append(index)
        return groups

    def _push_lanes(
        self, parts: dict[int, list[Candidate]], progress: _Progress, news: str
    ) -> None:
        """Each lane its part, the lanes not answered yet at once (in threads: each
        waits for its master); the first error once all are done (those that answered
        are recorded in ``progress``: not sent again)."""
        waiting = {
            lane: part
            for lane, part in parts.items()
            if len(progress.answers.get(lane, ())) < len(part)
        }
        if len(waiting) <= 1:
            for lane, part in waiting.items():
                self._push_lane(lane, part, progress, news)
            return
        if self._senders is None:
            self._senders = ThreadPoolExecutor(len(self.lanes), "scrapy-redis-lanes")
        sends = [
            self._senders.submit(self._push_lane, lane, part, progress, news)
            for lane, part in waiting.items()
        ]
        wait(sends)
        for send in sends:
            send.result()

    def close(self) -> None:
        """Stop the threads that send the lanes' parts (made again if pushed again)."""
        if self._senders is not None:
            self._senders.shutdown(wait=False)
            self._senders = None

    def _push_lane(
        self, lane: int, candidates: list[Candidate], progress: _Progress, news: str
    ) -> None:
        answers = progress.answers.setdefault(lane, [])
        while len(answers) < len(candidates):
            # the first part is the batch's write; a later part (after a layer filled) a
            # new one: the lane's record then answers for that part
            number = progress.numbers.get(lane)
            if number is None:
                with self._take_lock:  # lanes are sent from several threads
                    number = progress.write if not answers else self.writes.take()
                progress.numbers[lane] = number
            rest = candidates[len(answers) :]
            answers += self.lanes[lane].push_new(rest, self.filters[lane], news, write=number)
            del progress.numbers[lane]


class LanedFeed:
    """The requests of every lane (a :class:`LeasedFeed` each), taken in turn: the lane
    whose batch is being handed out until it is done, then the next lane that has
    requests. Lanes found empty are tried after the others for :data:`EMPTY_FOR`
    seconds (a pop of an empty lane is a round trip for nothing), unless this worker
    pushed to them or :meth:`has_requests` found requests there."""

    def __init__(
        self, queue: LanedQueue, feeds: Sequence[LeasedFeed], clock: Any = time.monotonic
    ) -> None:
        self.queue = queue
        self.feeds = list(feeds)
        self.clock = clock
        self._current = 0
        self._empty_until: dict[int, float] = {}
        if queue is not None:
            queue.on_pushed = self.lane_filled

    def lane_filled(self, lane: int) -> None:
        """Requests were pushed to ``lane``: try it before the lanes found empty."""
        self._empty_until.pop(lane, None)

    def next(self) -> Request | None:
        feeds, current = self.feeds, self._current
        if feeds[current].holding():
            request = feeds[current].next()
            if request is not None or feeds[current].holding():
                return request  # (None: held back by pacing)
        for lane in self._turns():
            feed = feeds[lane]
            request = feed.next()
            if request is not None or feed.holding():
                self._current = lane
                self._empty_until.pop(lane, None)
                return request
            self._empty_until[lane] = self.clock() + EMPTY_FOR
        return None

    def _turns(self) -> list[int]:
        """The lanes to pop from, from the one after the current: those not found empty
        lately first."""
        count = len(self.feeds)
        order = [(self._current + step) % count for step in range(1, count + 1)]
        now = self.clock()
        fresh = [lane for lane in order if self._empty_until.get(lane, 0) <= now]
        return fresh + [lane for lane in order if lane not in fresh]

    def holding(self) -> int:
        return sum(feed.holding() for feed in self.feeds)

    def in_hand(self) -> int:
        return sum(feed.in_hand() for feed in self.feeds)

    def has_requests(self) -> bool:
        """Whether a lane holds requests (those that do are popped again at their turn)."""
        holding = self.queue.lanes_holding(first=self._current)
        for lane, found in enumerate(holding):
            if found:
                self.lane_filled(lane)
        return any(holding)

    def others_hold_leases(self) -> bool:
        """Whether other workers hold leases in any lane: one ZCARD per lane, pipelined."""
        pipe = self.queue.server.pipeline(transaction=False)
        for feed in self.feeds:
            pipe.zcard(feed.book.deadlines_key)
        counts = pipe.execute()
        return any(n > len(f.book.held) for n, f in zip(counts, self.feeds, strict=True))

    def work_elsewhere(self) -> bool:
        if self.has_requests():
            return True
        for feed in self.feeds:
            feed.release_done()
        return self.others_hold_leases()

    def maintain(self) -> None:
        _each(self.feeds, lambda feed: feed.maintain())

    def recover(self) -> None:
        _each(self.feeds, lambda feed: feed.recover())

    def give_back_all(self) -> None:
        _each(self.feeds, lambda feed: feed.give_back_all())

    def clear(self) -> None:
        for feed in self.feeds:
            feed.clear()
        server = self.queue.server
        server.unlink(lanes_key(self.queue.key, is_cluster(server)))

    def flush_keys(self) -> list[str]:
        return [key for feed in self.feeds for key in feed.flush_keys()]

    def key_types(self) -> list[tuple[str, str]]:
        return [pair for feed in self.feeds for pair in feed.key_types()]


def _each(feeds: Sequence[LeasedFeed], do: Callable[[LeasedFeed], object]) -> None:
    """``do(feed)`` for every lane, even when one fails (a master of a cluster down: the
    others' leases are still renewed); then the first failure is raised."""
    failure: BaseException | None = None
    for feed in feeds:
        try:
            do(feed)
        except OUTAGE_ERRORS as exc:
            failure = failure or exc
    if failure is not None:
        raise failure
