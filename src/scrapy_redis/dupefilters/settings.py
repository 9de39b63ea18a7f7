"""Which duplicate filter a crawl uses: read by the scheduler and by
``python -m scrapy_redis.migrate_dupefilter`` (which builds the crawl's filter)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.settings import SETTINGS_PRIORITIES

from scrapy_redis import defaults

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def dupefilter_class_path(settings: BaseSettings) -> Any:
    """DUPEFILTER_CLASS if the project set it, else SCHEDULER_DUPEFILTER_CLASS (ours).

    Scrapy's default DUPEFILTER_CLASS filters in one process's memory only, which
    is never what a shared queue wants.
    """
    if (settings.getpriority("DUPEFILTER_CLASS") or 0) > SETTINGS_PRIORITIES["default"]:
        return settings.get("DUPEFILTER_CLASS")
    return settings.get("SCHEDULER_DUPEFILTER_CLASS") or defaults.SCHEDULER_DUPEFILTER_CLASS
