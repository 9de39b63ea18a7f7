"""A stats collector whose stats live in a Redis hash shared by every worker.

Every update is one atomic command or Lua script, so concurrent workers never
lose increments. Values keep their type: integers and floats are stored as
decimal text (``HINCRBY``/``HINCRBYFLOAT`` work on them), datetimes as ISO-8601
text in UTC, strings as they are (unless they would read back as another
type), and anything else (bool, None, lists, dicts) as ``json:<JSON>``.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError
from scrapy.statscollectors import StatsCollector

from scrapy_redis import defaults
from scrapy_redis._engine import engine_scheduler
from scrapy_redis.connection import get_redis_from_crawler
from scrapy_redis.keys import format_key
from scrapy_redis.scripts import script
from scrapy_redis.utils import bytes_to_str

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from typing_extensions import Self

_JSON = "json:"
_INT = re.compile(r"-?\d+")
_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?([+-]\d{2}:\d{2})?")


def encode_value(value: Any) -> str:
    """The text stored for a stat value."""
    if isinstance(value, bool) or value is None:
        return _JSON + json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(timezone.utc)
        return str(value.isoformat())
    if isinstance(value, str):
        plain = decode_value(value)
        return value if type(plain) is str and plain == value else _JSON + json.dumps(value)
    return _JSON + json.dumps(value, default=str)


def decode_value(raw: Any) -> Any:
    """The stat value stored as ``raw`` (bytes or str)."""
    text = bytes_to_str(raw)
    if _INT.fullmatch(text):
        return int(text)
    if text.startswith(_JSON):
        try:
            return json.loads(text[len(_JSON) :])
        except ValueError:
            return text
    if _DATETIME.fullmatch(text):
        return datetime.fromisoformat(text)
    try:
        return float(text)
    except ValueError:
        return text


class RedisStatsCollector(StatsCollector):
    """Stats in the hash STATS_KEY (default ``<spider>:stats``), shared by all workers.

    At close the hash is deleted only when SCHEDULER_PERSIST is off and, when the
    Redis scheduler is used, this was the last worker of the crawl.
    """

    def __init__(self, crawler: Crawler, spider: Spider | None = None) -> None:
        super().__init__(crawler)
        self.server = get_redis_from_crawler(crawler)
        self.spider_name = spider.name if spider else (crawler.spidercls.name or "scrapy")
        self.stats_key = crawler.settings.get("STATS_KEY", defaults.STATS_KEY)
        self.persist = crawler.settings.getbool("SCHEDULER_PERSIST", defaults.SCHEDULER_PERSIST)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    @classmethod
    def from_spider(cls, spider: Spider) -> Self:
        return cls(spider.crawler, spider)

    def _get_key(self, spider: Spider | None = None) -> str:
        return format_key(self.stats_key, spider.name if spider else self.spider_name)

    def get_value(self, key: str, default: Any = None, spider: Spider | None = None) -> Any:
        raw = self.server.hget(self._get_key(spider), key)
        return default if raw is None else decode_value(raw)

    def get_stats(self, spider: Spider | None = None) -> dict[str, Any]:
        raw = self.server.hgetall(self._get_key(spider))
        return {bytes_to_str(name): decode_value(value) for name, value in raw.items()}

    def set_value(self, key: str, value: Any, spider: Spider | None = None) -> None:
        self.server.hset(self._get_key(spider), key, encode_value(value))

    def set_stats(self, stats: dict[str, Any], spider: Spider | None = None) -> None:
        pipe = self.server.pipeline(transaction=True)
        pipe.delete(self._get_key(spider))
        if stats:
            mapping: dict[str | bytes, str] = {k: encode_value(v) for k, v in stats.items()}
            pipe.hset(self._get_key(spider), mapping=mapping)
        pipe.execute()

    def inc_value(
        self,
        key: str,
        count: int | float = 1,
        start: int | float = 0,
        spider: Spider | None = None,
    ) -> None:
        name = self._get_key(spider)
        if start:
            script("stats_inc")(self.server, [name], [key, repr(count), repr(start)])
        elif isinstance(count, int):
            try:
                self.server.hincrby(name, key, count)
            except ResponseError:  # the stat holds a float
                self.server.hincrbyfloat(name, key, count)
        else:
            self.server.hincrbyfloat(name, key, count)

    def max_value(self, key: str, value: Any, spider: Spider | None = None) -> None:
        self._bound(key, value, "max", spider)

    def min_value(self, key: str, value: Any, spider: Spider | None = None) -> None:
        self._bound(key, value, "min", spider)

    def _bound(self, key: str, value: Any, mode: str, spider: Spider | None) -> None:
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        args = [key, encode_value(value), mode, "n" if numeric else "s"]
        script("stats_bound")(self.server, [self._get_key(spider)], args)

    def clear_stats(self, spider: Spider | None = None) -> None:
        self.server.unlink(self._get_key(spider))

    def open_spider(self, spider: Spider | None = None) -> None:
        if spider is not None:
            self.spider_name = spider.name

    def close_spider(self, spider: Spider | None = None, reason: str | None = None) -> None:
        self._stats = self.get_stats()
        super().close_spider(reason=reason)
        if not self.persist and self._last_worker():
            self.clear_stats()

    def _last_worker(self) -> bool:
        scheduler = engine_scheduler(self._crawler)
        cleared = getattr(scheduler, "cleared_shared_data", None)
        return True if cleared is None else bool(cleared)
