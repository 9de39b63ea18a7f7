"""A stats collector whose stats live in a Redis hash shared by every worker.

Updates are kept in the worker, merged per stat, for at most
STATS_FLUSH_INTERVAL seconds, then written in one Lua script call (increments are
sent as increments), so concurrent workers never lose increments, and a call sent
again (a lost reply, see writes.py) is applied once; reads add what is not
written yet. Values keep their type (see :mod:`scrapy_redis.metrics.values`,
whose ``encode_value``/``decode_value`` this module still provides).

Every update is also applied to this worker's own stats, kept in memory
(:mod:`scrapy_redis.metrics.worker`) and written, by the same script call, to the
worker's hash ``<stats key>:worker:<worker id>``.
"""

from __future__ import annotations

import logging
import pprint
from typing import TYPE_CHECKING, Any

from scrapy.statscollectors import StatsCollector

from scrapy_redis import defaults
from scrapy_redis.connection import from_settings as redis_from_settings
from scrapy_redis.connection import is_cluster
from scrapy_redis.core.compat import PerInstance
from scrapy_redis.core.engine import installed_reactor
from scrapy_redis.core.logsafe import LIMIT, shorten
from scrapy_redis.metrics.values import Backlog, decode_value, encode_value
from scrapy_redis.metrics.worker import WorkerStats, unlink_stats, worker_ttl
from scrapy_redis.scheduling.api import shared_scheduler
from scrapy_redis.scheduling.workers import crawler_worker_id
from scrapy_redis.store.keys import format_key, stats_workers_key, worker_stats_key
from scrapy_redis.store.outage import OUTAGE_ERRORS, OutageGuard, outage_guard
from scrapy_redis.store.scripts import script
from scrapy_redis.store.writes import WriteIds, writes_ttl
from scrapy_redis.utils import bytes_to_str

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from typing_extensions import Self

__all__ = ["RedisStatsCollector", "decode_value", "encode_value"]

logger = logging.getLogger(__name__)

#: Seconds between writes of a worker's rates while they are not 0 and nothing else is
#: written (so that they fall to 0 in its hash when it stops crawling).
RATES_REFRESH = 5.0


class RedisStatsCollector(StatsCollector):
    """Stats in the hash STATS_KEY (default ``<spider>:stats``), shared by all workers.

    ``get_value()``, ``get_stats()`` read the fleet's totals; ``get_worker_value()``,
    ``get_worker_stats()`` this worker's own stats, also written to the hash
    ``<stats key>:worker:<worker id>`` (kept STATS_WORKER_TTL seconds after its last
    write). At close the hashes are deleted only when SCHEDULER_PERSIST is off and,
    when the Redis scheduler is used, this was the last worker of the crawl. Updates
    are written every STATS_FLUSH_INTERVAL seconds (0: at once); while Redis is
    unreachable they are kept (merged) in memory and written when it is back.

    ``clock`` is the ``IReactorTime`` the flush timer runs on (a ``task.Clock`` in
    tests); by default, the installed reactor.
    """

    # Defaults for subclasses whose __init__ does not call ours (read from the crawler).
    server = PerInstance(lambda self: redis_from_settings(self._crawler.settings))
    spider_name = PerInstance(lambda self: self._crawler.spidercls.name or "scrapy")
    stats_key = PerInstance(lambda self: self._setting("STATS_KEY", defaults.STATS_KEY))
    persist = PerInstance(
        lambda self: self._crawler.settings.getbool("SCHEDULER_PERSIST", defaults.SCHEDULER_PERSIST)
    )
    flush_interval = PerInstance(
        lambda self: self._crawler.settings.getfloat(
            "STATS_FLUSH_INTERVAL", defaults.STATS_FLUSH_INTERVAL
        )
    )
    clock: Any = None
    _flush_call: Any = None
    _guard = PerInstance[OutageGuard](lambda self: self._new_guard())
    _backlog = PerInstance(lambda _: Backlog())
    _sending: tuple[int, Backlog] | None = None
    _writes = PerInstance(lambda self: WriteIds(writes_ttl(self._crawler.settings)))
    #: The crawler's worker id: the one its scheduler registers (workers.crawler_worker_id).
    worker_id = PerInstance(lambda self: crawler_worker_id(self._crawler))
    worker_ttl = PerInstance(lambda self: worker_ttl(self._crawler.settings))
    _own = PerInstance(lambda self: WorkerStats(self._seconds))
    _refresh_call: Any = None

    #: Whether :meth:`_replay` is running (see there).
    _replaying = False

    def __init__(
        self, crawler: Crawler, spider: Spider | None = None, *, clock: Any = None
    ) -> None:
        super().__init__(crawler)
        self._crawler = crawler  # set by Scrapy >= 2.14 too
        self.server = redis_from_settings(crawler.settings)  # the original's lookup
        self.spider_name = spider.name if spider else (crawler.spidercls.name or "scrapy")
        self.stats_key = crawler.settings.get("STATS_KEY", defaults.STATS_KEY)
        self.persist = crawler.settings.getbool("SCHEDULER_PERSIST", defaults.SCHEDULER_PERSIST)
        self.flush_interval = crawler.settings.getfloat(
            "STATS_FLUSH_INTERVAL", defaults.STATS_FLUSH_INTERVAL
        )
        self.clock = clock
        self._flush_call: Any = None
        self._guard = self._new_guard()
        self._backlog = Backlog()
        # The batch being written (its write number) while Redis has not confirmed it.
        self._sending = None
        self._writes = WriteIds(writes_ttl(crawler.settings))
        self.worker_id = crawler_worker_id(crawler)
        self.worker_ttl = worker_ttl(crawler.settings)
        self._own = WorkerStats(self._seconds)
        self._refresh_call = None

    def _setting(self, name: str, default: Any) -> Any:
        return self._crawler.settings.get(name, default)

    def _new_guard(self) -> OutageGuard:
        guard = outage_guard(self._crawler)
        guard.on_recovery(self._replay)
        return guard

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    @classmethod
    def from_spider(cls, spider: Spider) -> Self:
        return cls(spider.crawler, spider)

    def _get_key(self, spider: Spider | None = None) -> str:
        return format_key(self.stats_key, spider.name if spider else self.spider_name)

    def get_value(self, key: str, default: Any = None, spider: Spider | None = None) -> Any:
        raw = self._guard.attempt(lambda: self.server.hget(self._get_key(spider), key), None)
        stats = {} if raw is None else {key: decode_value(raw)}
        return self._unwritten_applied_to(stats).get(key, default)

    def get_stats(self, spider: Spider | None = None) -> dict[str, Any]:
        raw: dict[Any, Any] = self._guard.attempt(
            lambda: self.server.hgetall(self._get_key(spider)), {}
        )
        stats = {bytes_to_str(name): decode_value(value) for name, value in raw.items()}
        return self._unwritten_applied_to(stats)

    def get_worker_value(self, key: str, default: Any = None) -> Any:
        """The value of stat ``key`` of this worker alone (not of the fleet)."""
        return self._own.values.get(key, default)

    def get_worker_stats(self) -> dict[str, Any]:
        """The stats of this worker alone (not of the fleet)."""
        return dict(self._own.values)

    def set_value(self, key: str, value: Any, spider: Spider | None = None) -> None:
        self._backlog.set(key, value)
        self._own.set(key, value)
        self._written()

    def set_stats(self, stats: dict[str, Any], spider: Spider | None = None) -> None:
        self._backlog, self._sending = Backlog(), None  # replaced, not written
        fields = [part for name, value in stats.items() for part in (name, encode_value(value))]
        script("stats_replace")(self.server, [self._get_key(spider)], fields)
        self._own.reset(stats)
        self._own.replace = True  # the worker's hash too, with the next write
        self._written()

    def inc_value(
        self,
        key: str,
        count: int | float = 1,
        start: int | float = 0,
        spider: Spider | None = None,
    ) -> None:
        self._backlog.inc(key, count, start)
        self._own.inc(key, count, start)
        self._written()

    def max_value(self, key: str, value: Any, spider: Spider | None = None) -> None:
        self._backlog.bound(key, value, "max")
        self._own.bound(key, value, "max")
        self._written()

    def min_value(self, key: str, value: Any, spider: Spider | None = None) -> None:
        self._backlog.bound(key, value, "min")
        self._own.bound(key, value, "min")
        self._written()

    # -- buffering and outages ----------------------------------------------------------

    def _written(self) -> None:
        """An update was added to the backlog: write it now, or within the flush interval."""
        if self.flush_interval <= 0:
            self._replay()
        else:
            self._schedule_flush()

    def _reactor(self) -> Any:
        return installed_reactor() if self.clock is None else self.clock

    def _seconds(self) -> float:
        return float(self._reactor().seconds())

    def _schedule_flush(self) -> None:
        if self._flush_call is None or not self._flush_call.active():
            self._flush_call = self._reactor().callLater(self.flush_interval, self._flush_due)

    def _schedule_refresh(self) -> None:
        """Write the worker's rates again soon, unless something else is written first."""
        if self._refresh_call is None or not self._refresh_call.active():
            delay = max(self.flush_interval, RATES_REFRESH)
            self._refresh_call = self._reactor().callLater(delay, self._refresh_due)

    def _refresh_due(self) -> None:
        self._refresh_call = None
        self._replay(refresh=True)

    def _flush_due(self) -> None:
        self._flush_call = None
        self._replay()
        if self._unwritten():  # Redis unreachable: try again later
            self._schedule_flush()

    def _unwritten(self) -> bool:
        return self._sending is not None or bool(self._backlog)

    def _unwritten_applied_to(self, stats: dict[str, Any]) -> dict[str, Any]:
        """``stats`` as they will be once the updates not written yet are."""
        if self._sending is not None:
            stats = self._sending[1].applied_to(stats)
        return self._backlog.applied_to(stats)

    def _replay(self, force: bool = False, refresh: bool = False) -> None:
        """Write the backlog: one script call (two after a failed one, sent again first);
        with ``refresh``, the worker's rates even if the backlog is empty. Not re-entered:
        the outage guard's log lines count themselves in these stats (Scrapy's
        ``log_count/*``), and are written by the call that logged them."""
        if self._replaying:
            return
        self._replaying = True
        try:
            self._write_backlog(force, refresh)
            for _ in range(2):  # what was logged meanwhile ("Redis is reachable again")
                if not self._backlog or self._guard.down:
                    break
                self._write_backlog(force, False)
        finally:
            self._replaying = False

    def _write_backlog(self, force: bool, refresh: bool) -> None:
        # Locals: every attribute read of a StatsCollector goes through Scrapy's slow
        # __getattribute__, and this runs for each update with STATS_FLUSH_INTERVAL = 0.
        guard, sending, own = self._guard, self._sending, self._own
        due = sending is not None or self._backlog or refresh or own.replace
        if not due or not (force or guard.may_try()):
            return
        while True:
            if sending is None:  # a failed batch keeps its number: applied once
                backlog = self._backlog
                if not (backlog or refresh or own.replace):
                    break
                sending = self._sending = (self._writes.take(), backlog)
                self._backlog = Backlog()
            try:
                self._store(*sending)
            except OUTAGE_ERRORS as exc:
                guard.failed(exc)
                return
            sending = self._sending = None
            refresh = False
        guard.succeeded()
        if own.moving:
            self._schedule_refresh()

    def _store(self, write: int, backlog: Backlog) -> None:
        """Write ``backlog`` to the fleet's hash, and the current values of the stats it
        updates to the worker's, in one script call, as write number ``write``."""
        name, writes, own = self._get_key(), self._writes, self._own
        cluster = is_cluster(self.server)
        keys = [name, writes.key(name)]
        keys += [worker_stats_key(name, self.worker_id, cluster), stats_workers_key(name, cluster)]
        replace = own.replacing()
        fields = own.fields([*backlog.values, *backlog.increments, *backlog.bounds], replace)
        args: list[Any] = [writes.ttl_ms, write, int(self.worker_ttl * 1000), self.worker_id]
        args += ["1" if replace else "0", len(fields) // 2, *fields]
        for key, value in backlog.values.items():
            args += ["set", key, encode_value(value), ""]
        for key, (count, start) in backlog.increments.items():
            args += ["inc", key, repr(count), repr(start) if start else ""]
        for key, (mode, value) in backlog.bounds.items():
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            args += [mode, key, encode_value(value), "n" if numeric else "s"]
        refused, missing = script("stats_write")(self.server, keys, args)
        own.written, own.replace = True, bool(missing)  # (expired: replaced at once)
        if refused:
            logger.error(
                "Redis refused updates of stats in %(key)s:\n%(refused)s",
                {"key": name, "refused": bytes_to_str(refused)},
            )

    def clear_stats(self, spider: Spider | None = None) -> None:
        """Delete the fleet's hash and the workers' hashes (those listed in
        ``<stats key>:workers``, and the list)."""
        self._backlog, self._sending = Backlog(), None
        self._own.reset({})
        name = self._get_key(spider)
        self._guard.attempt(lambda: unlink_stats(self.server, name, self.worker_id), None)

    def open_spider(self, spider: Spider | None = None) -> None:
        if spider is not None:
            self.spider_name = spider.name
        self._own.start()  # this worker's rates are measured from now

    def close_spider(self, spider: Spider | None = None, reason: str | None = None) -> None:
        self._replay(force=True)
        # after the last write, which may have scheduled a refresh of the rates: no timer
        # may write again once closed (a process running other crawls goes on)
        for call in (self._flush_call, self._refresh_call):
            if call is not None and call.active():
                call.cancel()
        if self._unwritten():
            logger.error(
                "Redis is unreachable: updates of %(count)d stats are lost",
                {"count": len(self._unwritten_applied_to({}))},
            )
        else:
            self._guard.attempt(lambda: self._writes.forget(self.server), None)
        self._stats = self.get_stats()
        if self._dump:
            self._dump_stats(spider or self._crawler.spider)
        if not self.persist and self._last_worker():
            self.clear_stats()

    def _dump_stats(self, spider: Spider | None) -> None:
        """This worker's stats under Scrapy's own header (``Dumping Scrapy stats:``, which
        log parsers such as scrapyd's LogParser look for: a job's stats), then the fleet's."""
        logger.info(
            "Dumping Scrapy stats:\n%(stats)s",
            {"stats": pprint.pformat(_bounded(self.get_worker_stats()))},
            extra={"spider": spider},
        )
        logger.info(
            "Dumping the fleet's stats (%(key)s; this worker: %(worker)s):\n%(stats)s",
            {
                "key": self._get_key(),
                "worker": self.worker_id,
                "stats": pprint.pformat(_bounded(self._stats)),
            },
            extra={"spider": spider},
        )

    def _last_worker(self) -> bool:
        scheduler = shared_scheduler(self._crawler)
        if scheduler is None:
            return True  # not the Redis scheduler: the original's behaviour
        return bool(scheduler.cleared_shared_data)  # None: it could not tell (outage)


def _bounded(stats: dict[str, Any]) -> dict[str, Any]:
    """``stats`` for the log: any name or text value read from the shared hash (which
    anyone may write to) cut to a few hundred characters."""
    return {
        shorten(name): shorten(value) if isinstance(value, str) and len(value) > LIMIT else value
        for name, value in stats.items()
    }
