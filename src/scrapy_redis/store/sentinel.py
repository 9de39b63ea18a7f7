"""Redis Sentinel: a ``redis+sentinel://`` REDIS_URL names the sentinels and the master.

``redis+sentinel://[user:password@]host[:port][,host[:port]...]/master_name[/db][?options]``
(``rediss+sentinel://`` for TLS to the master and to the sentinels). A sentinel's
port defaults to 26379. The user and password are the master's; ``options`` are
redis-py URL options of the master's connections, except those prefixed
``sentinel_`` (``sentinel_password=...``), which go, without the prefix, to the
connections to the sentinels. It is the form redisvl, prefect-redis, docket and
Redis-Sentinel-Url accept, so one deployment is written the same everywhere.

The client is redis-py's ``Sentinel(...).master_for(master_name)``: each new
connection asks the sentinels where the master is, so after a failover the
client reaches the promoted replica once the sentinels name it; until then its
calls fail with ``ConnectionError`` (``MasterNotFoundError`` is one), which the
components treat as an outage.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import redis
from redis.connection import SSLConnection, parse_url
from redis.sentinel import Sentinel, SentinelConnectionPool

from scrapy_redis import defaults
from scrapy_redis.exceptions import ConfigurationError

#: URL scheme -> whether it means TLS.
SCHEMES = {"redis+sentinel": False, "rediss+sentinel": True}
DEFAULT_PORT = 26379
#: Query options starting with this go to the connections to the sentinels.
SENTINEL_OPTION_PREFIX = "sentinel_"
FORM = "redis+sentinel://host:port[,host:port...]/master_name[/db]"


@dataclass
class SentinelURL:
    """What a ``redis+sentinel://`` URL says."""

    sentinels: list[tuple[str, int]]
    master: str
    tls: bool
    #: Keyword arguments of the master's connections (credentials, db, options).
    master_kwargs: dict[str, Any] = field(default_factory=dict)
    #: Keyword arguments of the connections to the sentinels (``sentinel_*`` options).
    sentinel_kwargs: dict[str, Any] = field(default_factory=dict)


def is_sentinel_url(url: object) -> bool:
    return isinstance(url, str) and url.partition("://")[0].lower() in SCHEMES


def parse_sentinel_url(url: str) -> SentinelURL:
    """The sentinels, master name and options of ``url``; ConfigurationError if malformed."""
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    path = [segment for segment in parts.path.split("/") if segment]
    if not hosts or not 1 <= len(path) <= 2:
        raise _bad_url(url, "it needs the sentinels' addresses and the master's name")
    query = parse_qsl(parts.query)
    plain = "rediss" if SCHEMES[parts.scheme.lower()] else "redis"
    own = [(n, v) for n, v in query if not n.startswith(SENTINEL_OPTION_PREFIX)]
    master_url = f"{plain}://{userinfo + '@' if userinfo else ''}_/{'/'.join(path[1:])}"
    master_kwargs = _redis_py_options(f"{master_url}?{urlencode(own)}")
    master_kwargs.pop("host", None)
    master_kwargs.pop("connection_class", None)
    others = [
        (n.removeprefix(SENTINEL_OPTION_PREFIX), v)
        for n, v in query
        if n.startswith(SENTINEL_OPTION_PREFIX)
    ]
    return SentinelURL(
        sentinels=[_address(url, host) for host in hosts.split(",")],
        master=path[0],
        tls=SCHEMES[parts.scheme.lower()],
        master_kwargs=master_kwargs,
        sentinel_kwargs=_redis_py_options(f"redis://?{urlencode(others)}"),
    )


def _redis_py_options(url: str) -> dict[str, Any]:
    """Keyword arguments of a redis:// URL, parsed (and typed) by redis-py itself."""
    options: dict[str, Any] = parse_url(url)  # type: ignore[no-untyped-call]
    return options


def _address(url: str, text: str) -> tuple[str, int]:
    """``host[:port]`` or ``[v6 address][:port]`` -> (host, port)."""
    host, colon, port = text.rpartition(":") if not text.endswith("]") else (text, "", "")
    if not colon:
        host, port = text, str(DEFAULT_PORT)
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit():
        raise _bad_url(url, f"{text!r} is not a host[:port]")
    return host, int(port)


def _bad_url(url: str, why: str) -> ConfigurationError:
    shown = mask_password(url)
    return ConfigurationError(f"REDIS_URL {shown!r} is not a Sentinel URL ({why}): use {FORM}")


def mask_password(url: str) -> str:
    userinfo, at, rest = url.partition("://")[2].rpartition("@")
    if not at or ":" not in userinfo:
        return url
    scheme = url.partition("://")[0]
    return f"{scheme}://{userinfo.partition(':')[0]}:***@{rest}"


def sentinel_client(url: str, redis_cls: type[Any], kwargs: dict[str, Any]) -> redis.Redis:
    """A client of the master named by ``url``, found through its sentinels.

    ``kwargs`` are the client's keyword arguments (REDIS_PARAMS and the like; what the
    URL says wins); ``kwargs["sentinel_kwargs"]`` (REDIS_SENTINEL_PARAMS) those of the
    connections to the sentinels, merged over ``defaults.REDIS_SENTINEL_PARAMS``.
    """
    if not (isinstance(redis_cls, type) and issubclass(redis_cls, redis.Redis)):
        raise ConfigurationError(
            f'REDIS_PARAMS["redis_cls"] is {redis_cls!r}: a redis+sentinel:// REDIS_URL needs '
            "redis.Redis or a subclass of it (remove redis_cls, or use a redis:// URL)"
        )
    parsed = parse_sentinel_url(url)
    master_kwargs = {
        name: value
        for name, value in kwargs.items()
        if name not in {"host", "port", "sentinel_kwargs"}
    }
    master_kwargs.update(parsed.master_kwargs)
    sentinel_kwargs = sentinel_connection_kwargs(parsed, master_kwargs, kwargs)
    if parsed.tls:
        master_kwargs["ssl"] = True
    manager = Sentinel(  # type: ignore[no-untyped-call]
        parsed.sentinels, sentinel_kwargs=sentinel_kwargs
    )
    client: redis.Redis = manager.master_for(  # type: ignore[no-untyped-call]
        parsed.master, redis_class=redis_cls, **master_kwargs
    )
    return client


def sentinel_connection_kwargs(
    parsed: SentinelURL, master_kwargs: dict[str, Any], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """Keyword arguments of the connections to the sentinels: the defaults, then (with
    TLS) the master's ``ssl_*`` options, then REDIS_SENTINEL_PARAMS, then the URL's
    ``sentinel_*`` options."""
    params = copy.deepcopy(defaults.REDIS_SENTINEL_PARAMS)
    if parsed.tls:
        params["ssl"] = True
        params.update({n: v for n, v in master_kwargs.items() if n.startswith("ssl_")})
    params.update(kwargs.get("sentinel_kwargs") or {})
    params.update(parsed.sentinel_kwargs)
    return params


def describe(client: Any) -> str | None:
    """``redis+sentinel://host:port,.../master/db`` for a client of a Sentinel master
    (password masked), None for any other client."""
    pool = getattr(client, "connection_pool", None)
    if not isinstance(pool, SentinelConnectionPool):
        return None
    kwargs = pool.connection_kwargs
    tls = issubclass(pool.connection_class, SSLConnection)
    hosts = ",".join(
        _format_address(sentinel.connection_pool.connection_kwargs)
        for sentinel in pool.sentinel_manager.sentinels
    )
    auth = f"{kwargs.get('username') or ''}:***@" if kwargs.get("password") else ""
    scheme = "rediss+sentinel" if tls else "redis+sentinel"
    return f"{scheme}://{auth}{hosts}/{pool.service_name}/{kwargs.get('db', 0)}"


def _format_address(kwargs: dict[str, Any]) -> str:
    host = str(kwargs.get("host", "localhost"))
    return f"[{host}]:{kwargs.get('port')}" if ":" in host else f"{host}:{kwargs.get('port')}"
