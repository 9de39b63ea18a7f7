"""The project's crawls as the dashboard sees them: read through
:mod:`scrapy_redis.fleet.status`, changed through :mod:`scrapy_redis.dashboard.actions`.

Every method does blocking Redis calls: the web server runs them in its thread pool.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

from redis.exceptions import ResponseError

from scrapy_redis import defaults
from scrapy_redis.dashboard import actions
from scrapy_redis.exceptions import InvalidStartMessageError, ScrapyRedisError
from scrapy_redis.fleet.crawl_keys import SpiderServers, crawl_keys, spider_settings
from scrapy_redis.fleet.operations import purge_queue
from scrapy_redis.fleet.status import crawl_status, project_spiders, unreadable_status
from scrapy_redis.scheduling.workers import alive_workers
from scrapy_redis.start.messages import StartMessageRules
from scrapy_redis.store.redis_values import printable

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.settings import BaseSettings

    from scrapy_redis.fleet.crawl_keys import CrawlKeys
    from scrapy_redis.fleet.status import CrawlStatus


class ActionError(ValueError):
    """An action the dashboard refuses (the message says why)."""


class Fleet:
    """The crawls of the spiders ``spiders`` (default: the project's) in ``server``."""

    def __init__(
        self, server: Any, settings: BaseSettings, spiders: list[type[Spider]] | None = None
    ) -> None:
        self.server = server
        self.settings = settings
        found = spiders or cast("list[type[Spider]]", project_spiders(settings))
        self.spiders = {cls.name: cls for cls in found}
        #: Each spider's client: ``server``, or one of the Redis its own settings name.
        self.servers = SpiderServers(settings, server)

    def statuses(self) -> dict[str, Any]:
        """What ``/api/status`` answers: the server's time and each crawl's status."""
        crawls = [self._readable_status(name).to_json() for name in sorted(self.spiders)]
        return {"time": time.time(), "crawls": crawls}

    def _readable_status(self, spider: str) -> CrawlStatus:
        """The status of ``spider``'s crawl; if none of it can be read, one that says so
        (the other crawls are shown all the same)."""
        try:
            return self.status(spider)
        except (ScrapyRedisError, ResponseError) as exc:
            problem = getattr(exc, "detail", None) or printable(exc)
            return unreadable_status(spider, self.server_of(spider), problem)

    def status(self, spider: str) -> CrawlStatus:
        return crawl_status(self.server_of(spider), self.settings, self._spidercls(spider))

    def server_of(self, spider: str) -> Any:
        """The Redis client of ``spider``'s crawl (see :class:`SpiderServers`)."""
        return self.servers.of(self._spidercls(spider))

    def _spidercls(self, spider: str) -> type[Spider]:
        try:
            return self.spiders[spider]
        except KeyError:
            raise ActionError(f"no spider {spider!r} in this project") from None

    def keys(self, spider: str) -> CrawlKeys:
        return crawl_keys(self.server_of(spider), self.settings, self._spidercls(spider))

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
        keys = self.keys(spider)
        if not keys.start_keys:
            raise ActionError(f"{spider} reads no start key: it is not a RedisSpider")
        key = body.get("key") or keys.start_keys[0]
        if key not in keys.start_keys:
            raise ActionError(f"{key!r} is not a start key of {spider}: {list(keys.start_keys)}")
        messages, cls = body.get("messages"), self._spidercls(spider)
        if not isinstance(messages, list) or not all(isinstance(m, str) for m in messages):
            raise ActionError("'messages' must be a list of strings")
        try:
            rules = StartMessageRules.from_settings(spider_settings(self.settings, cls))
            pushed = actions.push_start_messages(
                self.server_of(spider), key, messages, keys.start_mode, rules
            )
        except InvalidStartMessageError as exc:
            raise ActionError(f"invalid start message: {exc}") from exc
        return {"spider": spider, "key": key, "pushed": pushed}

    def requeue(self, spider: str, body: dict[str, Any]) -> dict[str, Any]:
        """Put back what dead workers held (and the dead letters if ``body["dead_letters"]``)."""
        keys = self.keys(spider)
        settings = spider_settings(self.settings, self._spidercls(spider))
        max_deliveries = settings.getint(
            "SCHEDULER_MAX_DELIVERIES", defaults.SCHEDULER_MAX_DELIVERIES
        )
        bases = [*keys.queue_keys, *keys.start_keys[:1]]  # start leases are under the first
        timeout = settings.getfloat("SCHEDULER_WORKER_TIMEOUT", defaults.SCHEDULER_WORKER_TIMEOUT)
        recovery = actions.requeue_expired(
            self.server_of(spider), bases, max_deliveries, bool(body.get("dead_letters")), timeout
        )
        return {"spider": spider, **recovery._asdict()}

    def purge(self, spider: str, body: dict[str, Any]) -> dict[str, Any]:
        """Delete the spider's queued and leased requests (every lane); ``body["confirm"]``
        must be the spider's name. Refused while workers of the crawl are alive (what they
        push next would mix with a crawl half deleted) unless ``body["force"]`` is true."""
        if body.get("confirm") != spider:
            raise ActionError(f"purging deletes the queue: confirm with the name {spider!r}")
        keys = self.keys(spider)
        server = self.server_of(spider)
        alive = alive_workers(server, keys.queue_key)
        if alive and body.get("force") is not True:
            raise ActionError(
                f"{len(alive)} workers of {spider} are alive ({', '.join(alive[:3])}"
                f"{'...' if len(alive) > 3 else ''}): stop them first, or purge with "
                '"force": true'
            )
        before = self.status(spider)
        for queue_key in keys.queue_keys:  # lanes are in different slots: a call each
            purge_queue(server, queue_key)
        return {"spider": spider, "purged": before.queued + before.leased}
