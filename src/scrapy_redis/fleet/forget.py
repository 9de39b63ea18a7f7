"""Forgetting URLs: their fingerprints removed from a crawl's duplicate filter, so that the
next time a worker finds them they are crawled (issue 27.4).

Fingerprints are computed by the crawl's own filter (:meth:`request_fingerprint`: the
project's REQUEST_FINGERPRINTER_CLASS, or the original's algorithm on the canonical URL),
exactly as the workers compute them. A split crawl (SCHEDULER_SHARDS) keeps each
fingerprint in the filter of one lane: the lane the scheduler picks for it. The set
filter forgets in either layout (a set; a sorted set with DUPEFILTER_LIFETIME), the lean
filter in its buckets; a Bloom filter cannot (:class:`BloomForgetError`). Each filter
that forgot counts it in ``<filter key>:forgotten``: running workers, which remember the
links they met (SCHEDULER_SEEN_CACHE_SIZE), drop that memory when they see it change
(within a second of meeting such a link again).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from scrapy import Request

from scrapy_redis.connection import is_cluster
from scrapy_redis.dupefilters.bloom import BloomDupeFilter, BloomForgetError
from scrapy_redis.exceptions import ScrapyRedisError
from scrapy_redis.politeness.limits import SlotLimits
from scrapy_redis.politeness.setup import fleet_limits_on
from scrapy_redis.queue import Candidate, Entry
from scrapy_redis.scheduling.lanes import lane_of
from scrapy_redis.store.keys import forgotten_key

#: What to do instead, when the crawl's filter is a Bloom filter.
BLOOM_ADVICE = (
    "A Bloom filter cannot forget a URL: its bits are shared with other URLs, so clearing "
    "them would make those be crawled again too. To crawl a URL again, push it as a start "
    "message (scrapy redis push SPIDER URL: start messages are not filtered by default); to "
    "forget URLs, use RFPDupeFilter or LeanDupeFilter (SCHEDULER_DUPEFILTER_CLASS) for the "
    "next crawl."
)


def forget_requests(
    filters: Sequence[Any],
    requests: Iterable[Request | str],
    slot_of: Callable[[Request], str] | None = None,
) -> list[bool]:
    """Forget ``requests`` (a URL stands for a GET request of it) in a crawl's duplicate
    filter: ``filters`` is its one filter, or the filter of each lane in lane order (as
    the scheduler builds them); ``slot_of``: with SCHEDULER_FLEET_LIMITS, a request's
    download slot, which picks its lane (see :func:`crawl_slot_of`). For each request,
    whether its fingerprint was recorded. BloomForgetError for a Bloom filter,
    ScrapyRedisError for a filter of another kind."""
    _check(filters)
    wanted = [Request(r) if isinstance(r, str) else r for r in requests]
    fingerprints = [filters[0].request_fingerprint(request) for request in wanted]
    by_lane: dict[int, list[int]] = {}
    for index, fingerprint in enumerate(fingerprints):
        lane = _lane(fingerprint, wanted[index], len(filters), slot_of)
        by_lane.setdefault(lane, []).append(index)
    found = [False] * len(wanted)
    for lane, indexes in by_lane.items():
        dupefilter = filters[lane]
        flags = dupefilter.forget_fingerprints([fingerprints[i] for i in indexes])
        for index, flag in zip(indexes, flags, strict=True):
            found[index] = flag
        if any(flags):  # running workers drop the fingerprints they remember
            server = dupefilter.server
            server.incr(forgotten_key(dupefilter.key, is_cluster(server)))
    return found


def crawl_slot_of(settings: Any, spider: Any) -> Callable[[Request], str] | None:
    """With SCHEDULER_FLEET_LIMITS, a split crawl keeps a request's fingerprint in the lane
    of its download slot: the slot of a request as the workers compute it; else None."""
    return SlotLimits(settings, spider).slot_of if fleet_limits_on(settings) else None


def _lane(
    fingerprint: str, request: Request, lanes: int, slot_of: Callable[[Request], str] | None
) -> int:
    if lanes == 1:
        return 0
    entry = Entry(b"", slot=slot_of(request)) if slot_of is not None else None
    return lane_of(Candidate(fingerprint, entry), lanes)


def _check(filters: Sequence[Any]) -> None:
    if not filters:
        raise ScrapyRedisError(
            "This crawl has no shared duplicate filter (SCHEDULER is not "
            "scrapy_redis.scheduler.Scheduler): there is nothing to forget."
        )
    if any(isinstance(dupefilter, BloomDupeFilter) for dupefilter in filters):
        raise BloomForgetError(BLOOM_ADVICE)
    for dupefilter in filters:
        if not hasattr(dupefilter, "forget_fingerprints"):
            raise ScrapyRedisError(
                f"The duplicate filter {type(dupefilter).__name__} (DUPEFILTER_CLASS) is not "
                "one of scrapy_redis.dupefilter: it cannot forget fingerprints."
            )
