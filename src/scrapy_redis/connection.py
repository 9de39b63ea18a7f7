"""Redis clients built from Scrapy settings.

One client, hence one connection pool, is shared by every scrapy-redis
component of a crawler (scheduler, dupefilter, pipeline, stats, spider):
:func:`get_redis_from_crawler`. :func:`get_redis_from_settings` (alias
:func:`from_settings`) builds a new client each call, as the original did.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

import redis
from scrapy.utils.misc import load_object

from scrapy_redis import defaults
from scrapy_redis.bootstrap import report_if_it_stops_the_crawl
from scrapy_redis.exceptions import RedisUnavailableError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

#: Setting name -> client keyword argument. These settings override REDIS_PARAMS.
SETTINGS_PARAMS_MAP = {
    "REDIS_URL": "url",
    "REDIS_HOST": "host",
    "REDIS_PORT": "port",
    "REDIS_DB": "db",
    "REDIS_ENCODING": "encoding",
    "REDIS_DECODE_RESPONSES": "decode_responses",
}

_INT_PARAMS = {"port", "db"}
_BOOL_PARAMS = {"decode_responses"}
_URL_OVERRIDES = {"host", "port"}

_clients: WeakKeyDictionary[Crawler, redis.Redis[Any]] = WeakKeyDictionary()


def redis_params_from_settings(settings: BaseSettings) -> dict[str, Any]:
    """Client keyword arguments: defaults, then REDIS_PARAMS, then the REDIS_* shortcuts.

    Unlike the original, an explicit ``0``/``False`` (``REDIS_DB = 0``) is honoured.
    """
    params = dict(defaults.REDIS_PARAMS)
    params["retry"] = copy.deepcopy(params["retry"])  # redis-py may update it per client
    params.update(settings.getdict("REDIS_PARAMS"))
    for setting, param in SETTINGS_PARAMS_MAP.items():
        if settings.get(setting) is None:
            continue
        if param in _INT_PARAMS:
            params[param] = settings.getint(setting)
        elif param in _BOOL_PARAMS:
            params[param] = settings.getbool(setting)
        else:
            params[param] = settings.get(setting)
    if isinstance(params.get("redis_cls"), str):
        params["redis_cls"] = load_object(params["redis_cls"])
    return params


def get_redis_from_settings(settings: BaseSettings) -> redis.Redis[Any]:
    """A new Redis client configured by ``settings``."""
    return get_redis(**redis_params_from_settings(settings))


#: Backwards compatible alias.
from_settings = get_redis_from_settings


def get_redis(**kwargs: Any) -> redis.Redis[Any]:
    """A new client: ``redis_cls.from_url(url, ...)`` if ``url`` is given, else ``redis_cls(...)``.

    Options in the URL win over keyword arguments.
    """
    redis_cls = kwargs.pop("redis_cls", defaults.REDIS_CLS)
    url = kwargs.pop("url", None)
    if url:
        for name in _URL_OVERRIDES:
            kwargs.pop(name, None)
        return redis_cls.from_url(url, **kwargs)  # type: ignore[no-any-return]
    return redis_cls(**kwargs)  # type: ignore[no-any-return]


def get_redis_from_crawler(crawler: Crawler) -> redis.Redis[Any]:
    """The client shared by all scrapy-redis components of ``crawler``.

    Created, and checked with a ``PING``, on first use.
    """
    client = _clients.get(crawler)
    if client is None:
        client = get_redis_from_settings(crawler.settings)
        try:
            ensure_reachable(client)
        except RedisUnavailableError as exc:
            report_if_it_stops_the_crawl(exc)  # one line, not asyncio's traceback
            raise
        _clients[crawler] = client
    return client


def ensure_reachable(client: redis.Redis[Any]) -> None:
    """Raise :class:`RedisUnavailableError`, naming the server, if ``client`` cannot PING."""
    try:
        client.ping()
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise RedisUnavailableError(
            f"Cannot connect to Redis at {describe_server(client)}: {str(exc).rstrip('.')}. "
            "Check REDIS_URL "
            "(or REDIS_HOST / REDIS_PORT / REDIS_PARAMS) and that the server is running."
        ) from None


def describe_server(client: Any) -> str:
    """A URL naming the server ``client`` talks to, with any password masked."""
    pool = getattr(client, "connection_pool", None)
    kwargs: dict[str, Any] = getattr(pool, "connection_kwargs", {}) or {}
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    connection_class = getattr(pool, "connection_class", None)
    scheme = "rediss" if "SSL" in getattr(connection_class, "__name__", "") else "redis"
    auth = ""
    if kwargs.get("password"):
        auth = f"{kwargs.get('username') or ''}:***@"
    host = kwargs.get("host", "localhost")
    return f"{scheme}://{auth}{host}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"
