"""Duplicate filtering with a Redis set shared by every worker.

One atomic ``SADD`` per request both checks and records its fingerprint. By
default fingerprints are computed exactly as the original scrapy-redis (0.8+)
did, so existing ``<spider>:dupefilter`` sets stay valid; when the project sets
REQUEST_FINGERPRINTER_CLASS, Scrapy's configured fingerprinter is used instead.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

from scrapy import Request
from scrapy.dupefilters import BaseDupeFilter
from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.utils.python import to_unicode
from scrapy.utils.request import referer_str

from scrapy_redis import defaults
from scrapy_redis.connection import get_redis_from_settings, is_cluster
from scrapy_redis.core.compat import PerInstance
from scrapy_redis.core.lifetime import SWEEP_MIN, Expiry, expiry_from_setting
from scrapy_redis.core.logsafe import shorten
from scrapy_redis.encoding.canonical import canonical_url
from scrapy_redis.exceptions import ScriptsUnavailableError, warn_from_settings
from scrapy_redis.queues.base import Candidate, batch_arg
from scrapy_redis.queues.seen_sets import SeenExpiring, SeenMembers, single_set
from scrapy_redis.store.keys import crawl_filter_key, format_key, standalone_dupefilter_key
from scrapy_redis.store.scripts import script
from scrapy_redis.store.stand_ins import delete_keys
from scrapy_redis.store.writes import WriteIds, writes_ttl

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.request import RequestFingerprinterProtocol
    from typing_extensions import Self


def request_fingerprint(request: Request) -> str:
    """The original scrapy-redis (>= 0.8) fingerprint: SHA1 of a JSON of method, URL and body."""
    if not request.body:  # the usual case; the same links recur from page to page
        return _bodiless_fingerprint(to_unicode(request.method), request.url)
    return fingerprint_of(to_unicode(request.method), request.url, request.body)


def fingerprint_of(method: str, url: str, body: bytes) -> str:
    """:func:`request_fingerprint` of a request's method, URL and body, as they are."""
    url = canonical_url(url)
    if _json_verbatim(method) and _json_verbatim(url):
        # What json.dumps(data, sort_keys=True) writes when no string needs escaping.
        text = f'{{"body": "{body.hex()}", "method": "{method}", "url": "{url}"}}'
    else:
        data = {"method": method, "url": url, "body": body.hex()}
        text = json.dumps(data, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()


def _json_verbatim(text: str) -> bool:
    """True if json.dumps (ensure_ascii) writes ``text`` between quotes unescaped."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


@lru_cache(maxsize=4096)
def _bodiless_fingerprint(method: str, url: str) -> str:
    return fingerprint_of(method, url, b"")


def configured_fingerprinter(crawler: Crawler) -> RequestFingerprinterProtocol | None:
    """Scrapy's fingerprinter if the project chose one with REQUEST_FINGERPRINTER_CLASS."""
    priority = crawler.settings.getpriority("REQUEST_FINGERPRINTER_CLASS") or 0
    if priority > SETTINGS_PRIORITIES["default"]:
        return crawler.request_fingerprinter
    return None


class RFPDupeFilter(BaseDupeFilter):
    """Redis-based request duplicates filter.

    Under :class:`scrapy_redis.scheduler.Scheduler` it is built by
    :meth:`from_spider` on the shared key SCHEDULER_DUPEFILTER_KEY. Under
    Scrapy's own scheduler (``DUPEFILTER_CLASS`` only) it is built by
    :meth:`from_crawler` on a one-time key ``dupefilter:<timestamp>`` that
    :meth:`close` deletes, as it deletes the key of a filter built directly.

    Every attribute has a class-level default, for subclasses whose ``__init__``
    sets only the original's (``server``, ``key``, ``debug``).
    """

    logger = logging.getLogger(__name__)
    debug = False
    logdupes = True
    #: Scrapy's fingerprinter, if the project chose one (None: the original's algorithm).
    fingerprinter: RequestFingerprinterProtocol | None = None
    stats: StatsCollector | None = None
    #: Whether :meth:`close` deletes the key (False for the scheduler's shared filter).
    temporary = True
    #: Numbers the fingerprints recorded, so that a call sent again is applied once.
    writes = PerInstance(lambda _: WriteIds())
    #: Whether the scheduler may check and record fingerprints inside its push script
    #: (by :meth:`request_fingerprint` and :attr:`key`) instead of calling
    #: :meth:`request_seen`; declared, or True unless ``request_seen()`` is overridden.
    checks_in_script: ClassVar[bool] = True
    #: Fingerprints that expire (DUPEFILTER_LIFETIME, see :mod:`scrapy_redis.core.lifetime`):
    #: then :attr:`key` is a sorted set, fingerprint -> when it expires; None: a set.
    expiry: Expiry | None = None
    #: Whether this class can expire fingerprints (a filter that cannot refuses the setting).
    supports_expiry: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "checks_in_script" not in cls.__dict__:
            cls.checks_in_script = cls.request_seen is RFPDupeFilter.request_seen

    def __init__(
        self,
        server: Any,
        key: str,
        debug: bool = False,
        *,
        fingerprinter: RequestFingerprinterProtocol | None = None,
        stats: StatsCollector | None = None,
        temporary: bool = True,
        expiry: Expiry | None = None,
    ) -> None:
        self.server = server
        self.key = key
        self.debug = debug
        self.logdupes = True
        self.fingerprinter = fingerprinter
        self.stats = stats
        self.temporary = temporary
        self.expiry = expiry

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Standalone use with Scrapy's scheduler: a one-time key, deleted on close."""
        return cls._build(crawler, standalone_dupefilter_key(defaults.DUPEFILTER_KEY), True)

    @classmethod
    def from_spider(cls, spider: Spider) -> Self:
        """Scheduler use: the spider's shared SCHEDULER_DUPEFILTER_KEY."""
        settings = spider.crawler.settings
        template = settings.get("SCHEDULER_DUPEFILTER_KEY", defaults.SCHEDULER_DUPEFILTER_KEY)
        dupefilter = cls._build(spider.crawler, format_key(template, spider.name), False)
        if is_cluster(dupefilter.server):  # in the queue's slot (see keys.py)
            queue = settings.get("SCHEDULER_QUEUE_KEY") or defaults.SCHEDULER_QUEUE_KEY
            queue_key = format_key(queue, spider.name)
            dupefilter.key = crawl_filter_key(dupefilter.key, queue_key, cluster=True)
        return dupefilter

    @classmethod
    def _build(cls, crawler: Crawler, key: str, temporary: bool) -> Self:
        dupefilter = cls(
            get_redis_from_settings(crawler.settings),
            key=key,
            debug=crawler.settings.getbool("DUPEFILTER_DEBUG"),
            fingerprinter=configured_fingerprinter(crawler),
            stats=crawler.stats,
            temporary=temporary,
        )
        dupefilter.writes = WriteIds(writes_ttl(crawler.settings))
        dupefilter.expiry = expiry_from_setting(crawler.settings.get("DUPEFILTER_LIFETIME"))
        if dupefilter.expiry is not None and not cls.supports_expiry:
            raise ValueError(
                f"DUPEFILTER_LIFETIME is set but {cls.__name__} cannot expire fingerprints: "
                "use scrapy_redis.dupefilter.RFPDupeFilter or LeanDupeFilter "
                "(SCHEDULER_DUPEFILTER_CLASS), or set DUPEFILTER_LIFETIME = 0."
            )
        return dupefilter

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        """Deprecated: use :meth:`from_crawler` (Scrapy no longer calls from_settings)."""
        warn_from_settings("RFPDupeFilter")
        key = standalone_dupefilter_key(defaults.DUPEFILTER_KEY)
        debug = settings.getbool("DUPEFILTER_DEBUG")
        return cls(get_redis_from_settings(settings), key=key, debug=debug, temporary=True)

    def request_seen(self, request: Request) -> bool:
        """Record the fingerprint of ``request``; True if it was already there.

        One script call (``seen_add.lua``), applied once even if redis-py sends it
        again after losing its reply (see :mod:`scrapy_redis.store.writes`): a plain
        ``SADD`` sent again would find its own fingerprint and drop a new request.
        """
        writes = self.writes
        fingerprint = self.request_fingerprint(request)
        if self.expiry is not None:
            lifetime = self.expiry.lifetime_ms(request)
            return self._record_expiring([fingerprint], [lifetime], fingerprint)[0]
        # A call that failed (an outage) is sent again with its number by the next call
        # for the same fingerprint: applied once, it is answered as the first was.
        args = [fingerprint, writes.ttl_ms, writes.take_for(fingerprint)]
        try:
            added = script("seen_add")(self.server, [self.key, writes.key(self.key)], args)
        except ScriptsUnavailableError:  # a test's stand-in for the client: the original's
            added = self.server.sadd(self.key, fingerprint)
        writes.confirmed()
        return int(added) == 0

    def expiring_members(self, candidates: Sequence[Candidate]) -> SeenExpiring:
        """With :attr:`expiry`: the push script's part for ``candidates`` (the sorted set,
        its lifetimes: ``lua/_expiry.lua``)."""
        lifetimes = batch_arg([c.lifetime_ms for c in candidates])
        fingerprints = [c.fingerprint for c in candidates if c.fingerprint is not None]
        return SeenExpiring(self.key, [self.key], ["expire", lifetimes, SWEEP_MIN], fingerprints)

    def seen_expiring(self, fingerprints: Sequence[str], lifetimes: Sequence[int]) -> list[bool]:
        """With :attr:`expiry`: record ``fingerprints`` (their ``lifetimes`` in ms, 0 =
        forever) in one script call applied once; for each, whether it was seen (alive)."""
        return self._record_expiring(fingerprints, lifetimes, (*fingerprints, *lifetimes))

    def _record_expiring(
        self, fingerprints: Sequence[str], lifetimes: Sequence[int], call: Any
    ) -> list[bool]:
        if not fingerprints:
            return []
        writes = self.writes
        args: list[Any] = [writes.ttl_ms, writes.take_for(call), SWEEP_MIN]
        for fingerprint, lifetime in zip(fingerprints, lifetimes, strict=True):
            args += (fingerprint, lifetime)
        flags = script("seen_expire_add")(self.server, [self.key, writes.key(self.key)], args)
        writes.confirmed()
        return [flag == ord("0") for flag in flags]

    def key_types(self) -> list[tuple[str, str]]:
        """The keys this filter writes under the scheduler's push script, with the type each
        must have (checked when the scheduler opens: see keytypes.py): its one set (a
        sorted set when fingerprints expire)."""
        return [(self.key, "set" if self.expiry is None else "zset")]

    def seen_members(self, fingerprints: Sequence[str]) -> SeenMembers:
        """Where the scheduler's push script records ``fingerprints``: members of the set
        :attr:`key` (see :mod:`scrapy_redis.queues.seen_sets`)."""
        return single_set(self.key, fingerprints)

    def request_fingerprint(self, request: Request) -> str:
        """The fingerprint stored for ``request`` (override to customise)."""
        if self.fingerprinter is not None:
            return self.fingerprinter.fingerprint(request).hex()
        return request_fingerprint(request)

    def forget(self, request_or_url: Request | str) -> bool:
        """Forget a request (or a URL, as a GET request) so that it is new again: its
        fingerprint as :meth:`request_fingerprint` computes it; whether it was recorded."""
        request = Request(request_or_url) if isinstance(request_or_url, str) else request_or_url
        return self.forget_fingerprints([self.request_fingerprint(request)])[0]

    def forget_fingerprints(self, fingerprints: Sequence[str]) -> list[bool]:
        """Forget ``fingerprints`` (one call, either layout: ``seen_forget.lua``); for
        each, whether it was recorded."""
        if not fingerprints:
            return []
        flags = script("seen_forget")(self.server, [self.key], list(fingerprints))
        return [flag == ord("1") for flag in flags]

    def for_lane(self, key: str, lanes: int) -> Self:
        """A filter like this one on ``key``, for one of ``lanes`` lanes of a split crawl
        (see :mod:`scrapy_redis.scheduling.lanes`): it holds about 1/``lanes`` of the fingerprints.
        Stats are the scheduler's filter's (the lanes' would overwrite each other)."""
        lane = copy.copy(self)
        lane.key = key
        lane.stats = None
        return lane

    def close(self, reason: str = "") -> None:
        """Delete the fingerprints, as the original did, unless this is the scheduler's
        shared filter (built by :meth:`from_spider`)."""
        if self.temporary:
            self.clear()
        self.writes.forget(self.server)

    def clear(self) -> None:
        """Delete every fingerprint."""
        delete_keys(self.server, self.key)

    def log(self, request: Request, spider: Spider) -> None:
        """Log a filtered duplicate, as Scrapy does, and count it in stats."""
        if self.debug:
            self.logger.debug(
                "Filtered duplicate request: %(request)s (referer: %(referer)s)",
                {"request": shorten(request), "referer": shorten(referer_str(request))},
                extra={"spider": spider},
            )
        elif self.logdupes:
            self.logger.debug(
                "Filtered duplicate request %(request)s - no more duplicates will be shown"
                " (see DUPEFILTER_DEBUG to show all duplicates)",
                {"request": shorten(request)},
                extra={"spider": spider},
            )
            self.logdupes = False
        stats = self.stats if self.stats is not None else getattr(spider.crawler, "stats", None)
        if stats is not None:
            stats.inc_value("dupefilter/filtered")


def __getattr__(name: str) -> Any:
    """``LeanDupeFilter`` (:mod:`scrapy_redis.dupefilters.lean`) and ``BloomDupeFilter``
    (:mod:`scrapy_redis.dupefilters.bloom`), importable from here like every duplicate
    filter; loaded on first use, as their modules import this one."""
    if name == "LeanDupeFilter":
        from scrapy_redis.dupefilters.lean import LeanDupeFilter

        return LeanDupeFilter
    if name == "BloomDupeFilter":
        from scrapy_redis.dupefilters.bloom import BloomDupeFilter

        return BloomDupeFilter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
