"""A request's download slot, and the limits the settings give that slot, as Scrapy's
downloader computes them (``scrapy/core/downloader/__init__.py``):

* the slot: ``request.meta["download_slot"]``, else the URL's host name; under
  CONCURRENT_REQUESTS_PER_IP the host's IP address once this worker's DNS cache
  knows it (as Scrapy: before the first lookup, the host name);
* the delay: ``DOWNLOAD_SLOTS[slot]["delay"]``, else a spider's ``download_delay``,
  else DOWNLOAD_DELAY (with AutoThrottle, at least AUTOTHROTTLE_START_DELAY to
  start with; then the fleet's AutoThrottle sets it); its jitter:
  ``DOWNLOAD_SLOTS[slot]["jitter"]`` (or ``["randomize_delay"]``), else
  DOWNLOAD_DELAY_JITTER, else 0.5 if RANDOMIZE_DOWNLOAD_DELAY (the next start is
  uniform in 0.5-1.5 x delay);
* the concurrency: ``DOWNLOAD_SLOTS[slot]["concurrency"]``, else a spider's
  ``max_concurrent_requests``, else CONCURRENT_REQUESTS_PER_IP if set, else
  CONCURRENT_REQUESTS_PER_DOMAIN.

With fleet-wide limits these hold for the whole fleet (``lua/_slots.lua``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy.utils.httpobj import urlparse_cached

from scrapy_redis import defaults
from scrapy_redis.exceptions import ConfigurationError

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.settings import BaseSettings

#: Slots whose limits are remembered (they are computed again past it).
_MAX_CACHED = 10_000
#: The most SCHEDULER_FLEET_EARLY may be (seconds): no worker leases a request it cannot
#: start within about a second.
MAX_EARLY = 1.0


def fleet_early(settings: BaseSettings) -> float:
    """SCHEDULER_FLEET_EARLY, in seconds (0 to MAX_EARLY)."""
    early = settings.getfloat("SCHEDULER_FLEET_EARLY", defaults.SCHEDULER_FLEET_EARLY)
    if not 0 <= early <= MAX_EARLY:
        raise ConfigurationError(
            f"SCHEDULER_FLEET_EARLY = {early!r} must be between 0 and {MAX_EARLY:g} (seconds "
            "before its slot's start a request may be handed out); use 0 to hand requests "
            "out only once their slot may start."
        )
    return early


@dataclass(frozen=True, slots=True)
class Limits:
    """One slot's limits, as the push scripts take them."""

    #: Seconds between two starts.
    delay: float
    #: Downloads in flight at most (0: no cap).
    concurrency: int
    #: The delay's random variation: 0.5 = uniform in 0.5-1.5 x delay.
    jitter: float

    def arg(self) -> list[float | int]:
        return [round(self.delay * 1000), max(0, self.concurrency), self.jitter]


def default_jitter(settings: BaseSettings) -> float:
    """DOWNLOAD_DELAY_JITTER (Scrapy >= 2.19) if set, else 0.5 if RANDOMIZE_DOWNLOAD_DELAY."""
    jitter = settings.get("DOWNLOAD_DELAY_JITTER")
    randomize_priority = settings.getpriority("RANDOMIZE_DOWNLOAD_DELAY") or 0
    if jitter is not None and (settings.getpriority("DOWNLOAD_DELAY_JITTER") or 0) >= (
        randomize_priority
    ):
        return float(jitter)
    return 0.5 if settings.getbool("RANDOMIZE_DOWNLOAD_DELAY", True) else 0.0


@dataclass(frozen=True, slots=True)
class Throttle:
    """AutoThrottle's settings, applied to the fleet's delay per slot (slot_feedback.lua)."""

    #: DOWNLOAD_DELAY: the least delay.
    min_delay: float
    #: AUTOTHROTTLE_MAX_DELAY.
    max_delay: float
    #: AUTOTHROTTLE_TARGET_CONCURRENCY.
    target: float

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Throttle | None:
        """None unless AUTOTHROTTLE_ENABLED."""
        if not settings.getbool("AUTOTHROTTLE_ENABLED"):
            return None
        return cls(
            settings.getfloat("DOWNLOAD_DELAY"),
            settings.getfloat("AUTOTHROTTLE_MAX_DELAY", 60.0),
            settings.getfloat("AUTOTHROTTLE_TARGET_CONCURRENCY", 1.0) or 1.0,
        )

    def args(self) -> list[int | float]:
        return [int(self.min_delay * 1000), int(self.max_delay * 1000), self.target]


class SlotLimits:
    """The slot of each request and its limits, from one crawl's settings and spider."""

    def __init__(self, settings: BaseSettings, spider: Any = None) -> None:
        self.per_slot: dict[str, Any] = settings.getdict("DOWNLOAD_SLOTS")
        self.ip_concurrency = settings.getint("CONCURRENT_REQUESTS_PER_IP")
        concurrency = self.ip_concurrency or settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN", 8)
        delay = settings.getfloat("DOWNLOAD_DELAY")
        if spider is not None and hasattr(spider, "download_delay"):
            delay = float(spider.download_delay)
        #: AutoThrottle's settings if enabled: the delay starts at AUTOTHROTTLE_START_DELAY
        #: (at least the delay), as Scrapy's AutoThrottle starts it.
        self.throttle = Throttle.from_settings(settings)
        if self.throttle is not None:
            delay = max(delay, settings.getfloat("AUTOTHROTTLE_START_DELAY", 5.0))
        if spider is not None and hasattr(spider, "max_concurrent_requests"):
            concurrency = int(spider.max_concurrent_requests)
        self.default = Limits(delay, concurrency, default_jitter(settings))
        self._cache: dict[str, Limits] = {}

    def slot_of(self, request: Request) -> str:
        """The download slot Scrapy's downloader puts ``request`` in."""
        meta_slot = request.meta.get("download_slot")
        if meta_slot is not None:
            return str(meta_slot).replace("\0", "")
        key = urlparse_cached(request).hostname or ""
        if self.ip_concurrency:
            from scrapy.resolver import dnscache

            key = dnscache.get(key, key)
        return key

    def of(self, slot: str) -> Limits:
        """The limits of ``slot``."""
        found = self._cache.get(slot)
        if found is None:
            if len(self._cache) >= _MAX_CACHED:
                self._cache.clear()
            found = self._cache[slot] = self._compute(slot)
        return found

    def _compute(self, slot: str) -> Limits:
        own = self.per_slot.get(slot)
        if not isinstance(own, dict):
            return self.default
        jitter = self.default.jitter
        if "jitter" in own:
            jitter = float(own["jitter"])
        elif "randomize_delay" in own:
            jitter = 0.5 if own["randomize_delay"] else 0.0
        return Limits(
            float(own.get("delay", self.default.delay)),
            int(own.get("concurrency", self.default.concurrency)),
            jitter,
        )
