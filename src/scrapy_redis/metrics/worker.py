"""This worker's own stats, beside the fleet's (see :mod:`scrapy_redis.stats`).

The stats collector applies every update to the fleet's shared hash and to a
:class:`WorkerStats` in memory: this worker's stats, as Scrapy's
``MemoryStatsCollector`` would have them. Each write of the fleet's updates also
writes, in the same script call, the current values of the stats it updates to
the worker's hash ``<stats key>:worker:<worker id>``, with ``worker/updated_at``
and this worker's recent rates (:class:`RateWindow`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from scrapy_redis import defaults
from scrapy_redis.connection import is_cluster
from scrapy_redis.exceptions import ConfigurationError
from scrapy_redis.metrics.values import encode_value, pick
from scrapy_redis.store.keys import stats_workers_key, worker_stats_key
from scrapy_redis.store.redis_values import Reader, text_of

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from scrapy.settings import BaseSettings

#: The stats whose rates the worker's hash holds, and the fields that hold them.
RATES = {
    "response_received_count": "worker/pages_per_second",
    "item_scraped_count": "worker/items_per_second",
}
#: Seconds the rates are measured over.
RATE_WINDOW = 60.0
#: Seconds between rate samples (at most ~RATE_WINDOW / this are kept).
_SAMPLE_EVERY = 1.0


class RateWindow:
    """Per-second rates of some counters over the last RATE_WINDOW seconds, from samples
    of their values taken when they are written (``now()``: the clock, in seconds)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        #: (time, counter values); the oldest is the base of the rates.
        self._samples: deque[tuple[float, tuple[float, ...]]] = deque()

    def start(self, counts: tuple[float, ...]) -> None:
        """The counters are ``counts`` now (the crawl starts): rates are measured from now."""
        self._samples = deque([(self.now(), counts)])

    def rates(self, counts: tuple[float, ...]) -> tuple[float, ...]:
        """The rate of each counter, now that they are ``counts``."""
        if not self._samples:  # not started: from the first write, from 0
            self.start(tuple(0 for _ in counts))
        now = self.now()
        samples = self._samples
        # Drop samples while the next one is still at least RATE_WINDOW seconds old.
        while len(samples) > 1 and now - samples[1][0] >= RATE_WINDOW:
            samples.popleft()
        since, before = samples[0]
        span = max(now - since, _SAMPLE_EVERY)
        if now - samples[-1][0] >= _SAMPLE_EVERY:
            samples.append((now, counts))
        return tuple(
            max(0.0, (count - old) / span) for count, old in zip(counts, before, strict=True)
        )


class WorkerStats:
    """This worker's stats in memory, and what its hash in Redis is to get."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.values: dict[str, Any] = {}
        #: The next write is to replace the hash (set_stats(), or it expired).
        self.replace = False
        #: A write succeeded (the first one replaces the hash: a left-over of a worker of
        #: the same id, which cannot be, or of a test, is not mixed in).
        self.written = False
        #: The rates last written are not all 0 (they are written again as they fall).
        self.moving = False
        self._window = RateWindow(now)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value

    def inc(self, key: str, count: float, start: float) -> None:
        self.values[key] = self.values.get(key, start) + count

    def bound(self, key: str, value: Any, mode: str) -> None:
        values = self.values
        values[key] = pick(mode, values[key], value) if key in values else value

    def start(self) -> None:
        """The crawl starts: the rates are measured from now."""
        self._window.start(self._counts())

    def _counts(self) -> tuple[float, ...]:
        return tuple(_count(self.values.get(stat)) for stat in RATES)

    def reset(self, values: dict[str, Any]) -> None:
        """The stats are now ``values`` (set_stats(), clear_stats())."""
        self.values = dict(values)

    def replacing(self) -> bool:
        """Whether the next write replaces the hash."""
        return self.replace or not self.written

    def fields(self, keys: Iterable[str], replace: bool) -> list[str]:
        """The fields to write (name, encoded value, ...): the current values of ``keys``
        (of every stat with ``replace``), and the rates."""
        values = self.values
        names = values if replace else [key for key in keys if key in values]
        fields: list[str] = []
        for name in names:
            fields += [name, encode_value(values[name])]
        rates = self._window.rates(self._counts())
        for field, rate in zip(RATES.values(), rates, strict=True):
            fields += [field, repr(round(rate, 3))]
        self.moving = any(rates)
        return fields


def _count(value: Any) -> float:
    """A counter's value (0 if it is missing, or is not a number)."""
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    return value if numeric else 0


def worker_ttl(settings: BaseSettings) -> float:
    """STATS_WORKER_TTL, checked."""
    ttl = settings.getfloat("STATS_WORKER_TTL", defaults.STATS_WORKER_TTL)
    if ttl < 0.001:
        raise ConfigurationError(
            f"STATS_WORKER_TTL = {ttl!r}: a worker's stats hash must be kept for some "
            "time after its last write. Set it to a number of seconds (default "
            f"{defaults.STATS_WORKER_TTL}, a day)."
        )
    return ttl


def unlink_stats(server: Any, stats_key: str, worker_id: str) -> None:
    """Delete the :func:`stats_keys` of ``stats_key`` (and ``worker_id``'s hash). All are
    in one Redis Cluster slot: one UNLINK per 500 keys."""
    keys = stats_keys(server, stats_key, [worker_id])
    for start in range(0, len(keys), 500):
        server.unlink(*keys[start : start + 500])


def stats_keys(server: Any, stats_key: str, workers: Iterable[str] = ()) -> list[str]:
    """The keys of the stats ``stats_key``: the fleet's hash, the hashes of the workers
    listed in ``<stats key>:workers`` (and of ``workers``), and that list, last (deleted
    in that order, no hash is left unlisted should the deletion stop half-way). A list
    that is not a sorted set (not written by a worker) lists none."""
    cluster = is_cluster(server)
    index = stats_workers_key(stats_key, cluster)
    members = Reader(server, problems=[]).zrange(index)
    listed = {text_of(member) for member in members}
    hashes = [worker_stats_key(stats_key, w, cluster) for w in sorted(listed.union(workers))]
    return [stats_key, *hashes, index]
