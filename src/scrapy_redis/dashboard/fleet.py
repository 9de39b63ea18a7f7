"""The project's crawls as the dashboard sees them: read through
:mod:`scrapy_redis.status`, changed through :mod:`scrapy_redis.dashboard.actions`.

Every method does blocking Redis calls: the web server runs them in its thread pool.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from scrapy_redis import defaults
from scrapy_redis.dashboard import actions
from scrapy_redis.exceptions import InvalidStartMessageError
from scrapy_redis.spider_settings import start_mode
from scrapy_redis.status import crawl_status, project_spiders

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.settings import BaseSettings

    from scrapy_redis.status import CrawlStatus


class ActionError(ValueError):
    """An action the dashboard refuses (the message says why)."""


class Fleet:
    """The crawls of the spiders ``spiders`` (default: the project's) in ``server``."""

    def __init__(
        self, server: Any, settings: BaseSettings, spiders: list[type[Spider]] | None = None
    ) -> None:
        self.server = server
        self.settings = settings
        self.spiders = {cls.name: cls for cls in (spiders or project_spiders(settings))}

    def statuses(self) -> dict[str, Any]:
        """What ``/api/status`` answers: the server's time and each crawl's status."""
        crawls = [self.status(name).to_json() for name in sorted(self.spiders)]
        return {"time": time.time(), "crawls": crawls}

    def status(self, spider: str) -> CrawlStatus:
        return crawl_status(self.server, self.settings, self._spidercls(spider))

    def _spidercls(self, spider: str) -> type[Spider]:
        try:
            return self.spiders[spider]
        except KeyError:
            raise ActionError(f"no spider {spider!r} in this project") from None

    def spider_settings(self, spider: str) -> BaseSettings:
        """The project's settings with ``spider``'s own (``custom_settings``)."""
        settings = self.settings.copy()
        self._spidercls(spider).update_settings(settings)
        return settings

    def act(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        """Run ``action`` ("push", "requeue" or "purge") as ``body`` asks; its result."""
        spider = body.get("spider")
        if not isinstance(spider, str):
            raise ActionError("the request names no spider ('spider')")
        run = {"push": self.push, "requeue": self.requeue, "purge": self.purge}.get(action)
        if run is None:
            raise ActionError(f"no action {action!r}: push, requeue or purge")
        return run(spider, body)

    def push(self, spider: str, body: dict[str, Any]) -> dict[str, Any]:
        """Push ``body["messages"]`` (URLs or JSON objects) to the spider's start key
        (``body["key"]``, one of its start keys; default the first)."""
        keys = self.status(spider).start_keys
        if not keys:
            raise ActionError(f"{spider} reads no start key: it is not a RedisSpider")
        key = body.get("key") or keys[0]
        if key not in keys:
            raise ActionError(f"{key!r} is not a start key of {spider}: {keys}")
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, str) for m in messages):
            raise ActionError("'messages' must be a list of strings")
        mode = start_mode(self.spider_settings(spider))
        try:
            pushed = actions.push_start_messages(self.server, key, messages, mode)
        except InvalidStartMessageError as exc:
            raise ActionError(f"invalid start message: {exc}") from exc
        return {"spider": spider, "key": key, "pushed": pushed}

    def requeue(self, spider: str, body: dict[str, Any]) -> dict[str, Any]:
        """Put back what dead workers held (and the dead letters if ``body["dead_letters"]``)."""
        status = self.status(spider)
        settings = self.spider_settings(spider)
        max_deliveries = settings.getint(
            "SCHEDULER_MAX_DELIVERIES", defaults.SCHEDULER_MAX_DELIVERIES
        )
        keys = [status.queue_key, *status.start_keys[:1]]  # start leases are under the first
        recovery = actions.requeue_expired(
            self.server, keys, max_deliveries, bool(body.get("dead_letters"))
        )
        return {"spider": spider, **recovery._asdict()}

    def purge(self, spider: str, body: dict[str, Any]) -> dict[str, Any]:
        """Delete the spider's queued and leased requests; ``body["confirm"]`` must be
        the spider's name."""
        if body.get("confirm") != spider:
            raise ActionError(f"purging deletes the queue: confirm with the name {spider!r}")
        status = self.status(spider)
        priorities = sorted(status.queued_by_priority or {})
        purged = status.queued + status.leased
        actions.purge_queue(self.server, status.queue_key, priorities)
        return {"spider": spider, "purged": purged}
