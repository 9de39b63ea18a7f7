"""The scheduler's enqueue side: requests accepted and not in Redis yet.

Round trips are batched: an enqueued request waits in the worker for at most
SCHEDULER_ENQUEUE_DELAY (or until SCHEDULER_ENQUEUE_BATCH_SIZE are waiting), then
one script call records the batch's fingerprints and pushes the new requests
(:meth:`~scrapy_redis.queue.Base.push_new`). A filter or queue that opted out of
the script (see ``checks_in_script`` and ``uses_push_script``) gets one
``request_seen()`` and one ``push()`` per request instead. Links this worker has
seen recorded are dropped without a round trip (:class:`SeenCache`). Requests the
serializer refuses are kept in this worker's memory (:class:`LocalQueue`).
"""

from __future__ import annotations

import heapq
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import count, islice
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError
from scrapy import signals

from scrapy_redis.connection import ServerIdentity
from scrapy_redis.core.engine import installed_reactor
from scrapy_redis.core.lifetime import lifetime_of
from scrapy_redis.core.logsafe import shorten
from scrapy_redis.exceptions import UnserializableRequestError
from scrapy_redis.queue import Candidate, Entry
from scrapy_redis.scheduling.due import META_KEY as DUE_META_KEY
from scrapy_redis.store.keytypes import is_wrong_type

if TYPE_CHECKING:
    from scrapy import Request
    from twisted.internet.base import DelayedCall

    from scrapy_redis.scheduling.context import SchedulerContext

logger = logging.getLogger("scrapy_redis.scheduler")  # the scheduler's parts log as the scheduler


@dataclass(slots=True)
class Unsent:
    """A request accepted by enqueue_request() and not pushed yet."""

    request: Request
    #: Script path: its fingerprint, computed when enqueued (None: dont_filter).
    fingerprint: str | None = None
    #: request_seen() path: whether request_seen() has recorded it already.
    seen_checked: bool = False


#: Most seconds between two looks at the filters' forget counters, by a worker's SeenCache.
FORGETS_EVERY = 1.0


class SeenCache:
    """Fingerprints this worker knows are in the shared set (bounded, oldest out).

    The set only grows while the server keeps its data, so a fingerprint found
    there once is a duplicate: repeated links are dropped without a round trip.
    A server that restarted, was restored from an older dump or failed over to
    a replica that was behind may have lost fingerprints (and the requests that
    went with them, which come back to be crawled again): the cache is dropped
    whenever the server's identity changes (see ServerIdentity) and when an
    outage ends, so that their links are checked with Redis again.
    """

    #: The deque that keeps the fingerprints in the order they were added (a seam for tests).
    order_type: type[deque[str]] = deque

    def __init__(self, size: int, identity: ServerIdentity | None = None) -> None:
        self.size = size
        self._identity = identity if identity is not None else ServerIdentity()
        self._epoch = self._identity.changes
        # A set to look up, a deque for the order: evicting the oldest is O(1). (A dict used
        # as a queue, ``del d[next(iter(d))]``, scans every slot deleted before its first
        # live entry: 87 us an eviction after 10^6 inserts, against ~0.3 us here.)
        self._fingerprints: set[str] = set()
        self._order: deque[str] = self.order_type()
        #: How many fingerprints were evicted (oldest out) since the cache was made.
        self.evicted = 0

    #: Reads the filters' forget counters (see fleet/forget.py), or None.
    forgets: Callable[[], Any] | None = None
    #: The clock of the looks at the forget counters (a seam for tests).
    clock: Callable[[], float] = staticmethod(time.monotonic)
    _forgets_seen: Any = None
    _forgets_read = -FORGETS_EVERY

    def __contains__(self, fingerprint: str) -> bool:
        if self._identity.changes != self._epoch:
            self.clear()
        return fingerprint in self._fingerprints and not self._forgotten()

    def _forgotten(self) -> bool:
        """Whether URLs were forgotten since the last look (at most every FORGETS_EVERY s,
        on a hit only): then the memory is dropped, and the hit asked of Redis."""
        if self.forgets is None or self.clock() - self._forgets_read < FORGETS_EVERY:
            return False
        return self._look_at_forgets()

    def _look_at_forgets(self) -> bool:
        """Read the forget counters: whether they changed since the last look (then the
        memory is dropped). The first look only sets what later looks compare with."""
        assert self.forgets is not None
        self._forgets_read = self.clock()
        try:
            counters = self.forgets()
        except Exception:  # Redis unreachable: the push will say so
            return False
        changed = self._forgets_seen is not None and counters != self._forgets_seen
        self._forgets_seen = counters
        if changed:
            self.clear()
        return changed

    def epoch(self) -> int:
        """Take before a call that records fingerprints; give it to :meth:`add`. The first
        one reads the forget counters: a forget after it is seen (read at the first hit
        instead, a forget between the record and that hit was taken for the baseline)."""
        if self.forgets is not None and self._forgets_seen is None:
            self._look_at_forgets()
        return self._identity.changes

    def add(self, fingerprints: Iterable[str], epoch: int) -> None:
        """Remember ``fingerprints``, recorded by a call that started at ``epoch``
        (nothing if the server changed since: what it recorded may be lost)."""
        if self._identity.changes != self._epoch:
            self.clear()
        if self.size <= 0 or epoch != self._epoch:
            return
        if self.forgets is not None and self._forgets_seen is None:
            return  # no baseline of the forget counters (unread): remember nothing yet
        known, order = self._fingerprints, self._order
        for fingerprint in fingerprints:
            if fingerprint not in known:
                known.add(fingerprint)
                order.append(fingerprint)
        while len(order) > self.size:
            known.discard(order.popleft())
            self.evicted += 1

    def __len__(self) -> int:
        return len(self._order)

    def clear(self) -> None:
        self._fingerprints.clear()
        self._order.clear()
        self._epoch = self._identity.changes


class LocalQueue(list):  # type: ignore[type-arg]
    """Requests kept in this worker's memory: those the serializer refused.

    A heap of (-priority, order, request); a list, so that asking whether it holds
    any (on every next_request()) costs no Python call.
    """

    def __init__(self) -> None:
        super().__init__()
        self._order = count()

    def push(self, request: Request) -> None:
        heapq.heappush(self, (-request.priority, next(self._order), request))

    def pop(self) -> Request | None:  # type: ignore[override]
        return heapq.heappop(self)[2] if self else None


class EnqueueBuffer:
    """Requests accepted and not pushed yet, sent in batches (see the module's doc)."""

    #: The requests due later (scheduling/due.py), if the queue keeps them.
    due: Any = None

    def __init__(
        self,
        context: SchedulerContext,
        dupefilter: Any,
        in_script: bool,
        seen: SeenCache,
        local: LocalQueue,
        delay: float,
        batch_size: int,
    ) -> None:
        self.context = context
        self.dupefilter = dupefilter
        #: Whether the push script checks the fingerprints (else request_seen() and push()).
        self.in_script = in_script
        self.seen = seen
        self.local = local
        self.delay = delay
        self.batch_size = batch_size
        self._unsent: deque[Unsent] = deque()
        # The batch whose push failed (an outage): its write number and size, kept to
        # send it again as it was, so that it is applied once (see writes.py).
        self._failed_push: tuple[int, int] | None = None
        self._send_call: DelayedCall | None = None
        self._unserializable_logged = False
        self._due_unsupported_logged = False

    def __len__(self) -> int:
        return len(self._unsent)

    def _due_unsupported(self) -> None:
        """A request due later that this queue cannot keep (a queue class of one's
        own): queued now, counted, said once."""
        self.context.counts.inc("scheduler/due/unsupported")
        if not self._due_unsupported_logged:
            self._due_unsupported_logged = True
            logger.warning(
                "meta[%(key)r] is not supported by this queue (requests due later need "
                "scrapy_redis.queue's queues, SCHEDULER_QUEUE_CLASS): such "
                "requests are queued now (counted in scheduler/due/unsupported)",
                {"key": DUE_META_KEY},
                extra={"spider": self.context.spider},
            )

    def add(self, request: Request) -> bool:
        """Accept ``request`` (see Scheduler.enqueue_request); False: a known duplicate."""
        context = self.context
        if self.due is None and DUE_META_KEY in request.meta:
            self._due_unsupported()
        elif self.due is not None and self.due.wants(request):  # see due.py
            later = context.calls.call(lambda: self.due.add(request), None)
            if later is not None:  # (None: Redis unreachable, unserializable: pushed now)
                return bool(later)
        fingerprint = None
        if self.in_script and not request.dont_filter:
            fingerprint = self.dupefilter.request_fingerprint(request)
            if fingerprint in self.seen:  # a link this worker has met before
                self.dupefilter.log(request, context.spider)
                return False
        self._unsent.append(Unsent(request, fingerprint))
        if self.delay > 0 and len(self._unsent) < self.batch_size:
            self._schedule_send()
            return True
        # While Redis is unreachable it is pushed when Redis is back (next request or
        # heartbeat); the engine is told it was accepted.
        return context.calls.call(lambda: self.send_now(answer_for=request), True)

    def send(self) -> bool:
        """Send what waits now, unless Redis is unreachable; whether nothing is left."""
        if self._unsent:
            self.context.calls.call(self.send_now, False)
        return not self._unsent

    def _schedule_send(self) -> None:
        if self._send_call is None or not self._send_call.active():
            reactor = self.context.reactor or installed_reactor()
            self._send_call = reactor.callLater(self.delay, self.send)

    def cancel_timer(self) -> None:
        if self._send_call is not None and self._send_call.active():
            self._send_call.cancel()

    def send_now(self, answer_for: Request | None = None) -> bool:
        """Dedup and push everything accepted so far, in batches (raises what Redis
        raises: call it through RedisCalls). Returns whether ``answer_for`` was new;
        the others' duplicates are reported with the ``request_dropped`` signal."""
        answer = True
        while self._unsent:
            # One script call per batch; otherwise one request at a time, so that a
            # failure half-way never pushes again what was already pushed.
            if self.in_script:
                size = self._failed_push[1] if self._failed_push else self.batch_size
                batch = list(islice(self._unsent, size))
                new = self._send_in_script(batch)
                del batch[len(new) :]  # a Bloom filter's layer filled: the rest go next
            else:
                batch = [self._unsent[0]]
                new = [self._send_checked(batch[0])]
            if not all(new):
                answer = self._report_duplicates(batch, new, answer_for) and answer
            for _ in batch:
                self._unsent.popleft()
            self.context.calls.guard.succeeded()  # only after a call that reached Redis
        return answer

    def send_at_close(self) -> None:
        """Push what is still buffered; a key of another type loses it (logged)."""
        try:
            self.send_now()
        except ResponseError as exc:
            if not is_wrong_type(exc):
                raise
            logger.error(
                "%(count)d requests could not be pushed to Redis: %(error)s",
                {"count": len(self._unsent), "error": exc},
                extra={"spider": self.context.spider},
            )
            self._unsent.clear()

    def _report_duplicates(
        self, batch: list[Unsent], new: list[bool], answer_for: Request | None
    ) -> bool:
        """Log the batch's duplicates; whether ``answer_for`` was not one of them."""
        context, answer = self.context, True
        for unsent, is_new in zip(batch, new, strict=True):
            if is_new:
                continue
            request = unsent.request
            self.dupefilter.log(request, context.spider)
            if request is answer_for:
                answer = False
            elif context.crawler is not None:
                context.crawler.signals.send_catch_log(
                    signals.request_dropped, request=request, spider=context.spider
                )
        return answer

    def _send_in_script(self, batch: list[Unsent]) -> list[bool]:
        """One script call: record the fingerprints, push the new requests. The answer may
        be for the first requests only (see Base.push_new): the others are sent next."""
        context = self.context
        candidates, refused = self._candidates(batch)
        epoch = self.seen.epoch()
        if self._failed_push is None:
            self._failed_push = (context.queue.writes.take(), len(batch))
        write = self._failed_push[0]
        new: list[bool] = context.queue.push_new(
            candidates, self.dupefilter, context.news.name, write=write
        )
        self._failed_push = None
        answered = batch[: len(new)]
        self.seen.add((unsent.fingerprint for unsent in answered if unsent.fingerprint), epoch)
        refused = {index: error for index, error in refused.items() if index < len(new)}
        context.counts.enqueued_to_redis(sum(new) - sum(new[index] for index in refused))
        for index, error in refused.items():
            if new[index]:
                self.keep_locally(batch[index].request, error)
        return new

    def _candidates(
        self, batch: list[Unsent]
    ) -> tuple[list[Candidate], dict[int, UnserializableRequestError]]:
        """The batch's candidates; the serializer's refusals by position (no entry)."""
        candidates: list[Candidate] = []
        refused: dict[int, UnserializableRequestError] = {}
        for index, unsent in enumerate(batch):
            entry: Entry | None = None
            try:
                entry = self.context.queue.encode(unsent.request)
            except UnserializableRequestError as exc:
                refused[index] = exc
            lifetime = lifetime_of(self.dupefilter, unsent.request)
            candidates.append(Candidate(unsent.fingerprint, entry, lifetime))
        return candidates, refused

    def _send_checked(self, unsent: Unsent) -> bool:
        """``request_seen()`` then ``push()``; whether the request was new."""
        request = unsent.request
        seen = self.dupefilter.request_seen
        if not (unsent.seen_checked or request.dont_filter) and seen(request):
            return False
        unsent.seen_checked = True
        try:
            self.context.queue.push(request)
        except UnserializableRequestError as exc:
            self.keep_locally(request, exc)
        else:
            self.context.counts.enqueued_to_redis()
        return True

    def keep_locally(self, request: Request, exc: Exception) -> None:
        """Keep a request the serializer refused in this worker's memory (logged once)."""
        if not self._unserializable_logged:
            logger.warning(
                "Unable to serialize request: %(request)s - reason: %(reason)s - kept in this "
                "worker's memory; no more unserializable requests will be logged (stats being "
                "collected: scheduler/unserializable). To store such requests in Redis, set "
                "SCHEDULER_SERIALIZER = 'scrapy_redis.picklecompat' on every worker (only if "
                "everyone who can write to this Redis is trusted)",
                {"request": shorten(request), "reason": shorten(exc, 1000)},
                extra={"spider": self.context.spider},
            )
            self._unserializable_logged = True
        self.local.push(request)
        self.context.counts.kept_in_memory()
