"""Redis clients built from Scrapy settings.

One client, hence one connection pool, is shared by every scrapy-redis
component of a crawler (scheduler, dupefilter, pipeline, stats, spider):
:func:`get_redis_from_settings` (alias :func:`from_settings`) returns the
client built for that settings object (a new one if its Redis settings
changed). Each component looks its client up through the same module-level
name the original used, so tests that patch those names keep working.

A Redis Cluster is named by a ``redis+cluster://`` (or ``rediss+cluster://``) URL
listing one or more of its nodes (:func:`cluster_from_url`); the client is then
redis-py's :class:`~redis.cluster.RedisCluster`. A plain URL that points at a
cluster node is refused when the crawl first reaches Redis, naming the URL to use.

Every connection such a client opens reads the server's ``run_id`` and
``master_replid`` first: :func:`server_identity` counts how often they changed,
so that what a worker remembers of the server's data (the scheduler's seen
cache) is dropped when the server restarted, was restored or failed over.
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException

from scrapy_redis import defaults
from scrapy_redis.exceptions import ConfigurationError, RedisUnavailableError
from scrapy_redis.store import permissions, sentinel
from scrapy_redis.store.bootstrap import report_if_it_stops_the_crawl
from scrapy_redis.store.describe import (  # re-exported: the original's module's neighbours
    connection_hint,
    describe_server,
)
from scrapy_redis.store.identity import (  # server_identity: re-exported
    ServerIdentity,
    remember_identity,
    server_identity,  # noqa: F401
)
from scrapy_redis.utils import load_configured

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

#: Settings object (by id) -> (a weak reference to it, its Redis settings, the client).
_clients: dict[int, tuple[weakref.ref[BaseSettings], str, redis.Redis[Any]]] = {}
_clients_lock = threading.Lock()


def redis_params_from_settings(settings: BaseSettings) -> dict[str, Any]:
    """Client keyword arguments: defaults, then REDIS_PARAMS, then the REDIS_* shortcuts.

    Unlike the original, an explicit ``0``/``False`` (``REDIS_DB = 0``) is honoured.
    """
    params = dict(defaults.REDIS_PARAMS)
    # redis-py may update these per client (redis-py 5 appends TimeoutError to the list
    # when retry_on_timeout is set): each client its own, the defaults left as they are
    params["retry"] = copy.deepcopy(params["retry"])
    params["retry_on_error"] = list(params["retry_on_error"])
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
        params["redis_cls"] = load_configured('REDIS_PARAMS["redis_cls"]', params["redis_cls"])
    if settings.getdict("REDIS_SENTINEL_PARAMS"):
        params["sentinel_kwargs"] = settings.getdict("REDIS_SENTINEL_PARAMS")
    return params


def get_redis_from_settings(settings: BaseSettings) -> redis.Redis[Any]:
    """The Redis client configured by ``settings``, shared by all its callers.

    The first call for a settings object builds the client; later calls with the
    same object return it, unless its Redis settings changed in between.
    """
    signature = redis_settings_signature(settings)
    with _clients_lock:
        cached = _clients.get(id(settings))
        if cached is not None and cached[0]() is settings and cached[1] == signature:
            return cached[2]
    client = _new_client(redis_params_from_settings(settings))
    key = id(settings)
    try:
        ref = weakref.ref(settings, lambda _: _clients.pop(key, None))
    except TypeError:  # cannot tell when it is gone: not cached
        return client
    with _clients_lock:
        _clients[key] = (ref, signature, client)
    return client


def redis_settings_signature(settings: BaseSettings) -> str:
    """The settings a client is built from, as text (objects by identity)."""
    params = sorted(settings.getdict("REDIS_PARAMS").items(), key=str)
    sentinel_params = sorted(settings.getdict("REDIS_SENTINEL_PARAMS").items(), key=str)
    return repr((params, [settings.get(name) for name in SETTINGS_PARAMS_MAP], sentinel_params))


#: Backwards compatible alias.
from_settings = get_redis_from_settings


def get_redis(**kwargs: Any) -> redis.Redis[Any]:
    """A new client: ``redis_cls.from_url(url, ...)`` if ``url`` is given, else ``redis_cls(...)``.

    Options in the URL win over keyword arguments. A ``redis+cluster://`` URL gives a
    :class:`~redis.cluster.RedisCluster` (see :func:`cluster_from_url`).
    """
    redis_cls = kwargs.pop("redis_cls", defaults.REDIS_CLS)
    url = kwargs.pop("url", None)
    if sentinel.is_sentinel_url(url):
        return sentinel.sentinel_client(url, redis_cls, kwargs)
    if kwargs.pop("sentinel_kwargs", None):
        raise ConfigurationError(
            "REDIS_SENTINEL_PARAMS is set, but REDIS_URL is not a redis+sentinel:// URL: "
            f"name the sentinels and the master in REDIS_URL ({sentinel.FORM})"
        )
    if url:
        for name in _URL_OVERRIDES:
            kwargs.pop(name, None)
        check_url(url)
        if is_cluster_url(url):
            cls = redis_cls if _is_cluster_class(redis_cls) else RedisCluster
            return cluster_from_url(url, cls, **kwargs)  # type: ignore[return-value]
        try:
            return redis_cls.from_url(url, **kwargs)  # type: ignore[no-any-return]
        except ValueError as exc:  # a port or an option redis-py cannot read
            raise _url_error(url, str(exc).rstrip(".")) from None
    return redis_cls(**kwargs)  # type: ignore[no-any-return]


#: URL schemes naming a Redis Cluster (plain and TLS).
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

#: URL schemes REDIS_URL may use.
URL_SCHEMES = ("redis", "rediss", "unix", *CLUSTER_SCHEMES, *sentinel.SCHEMES)


def check_url(url: object) -> None:
    """ConfigurationError, naming the forms REDIS_URL may take, if ``url`` is not a Redis URL
    (``localhost:6379``, ``http://...``)."""
    text = str(url)
    scheme = urlsplit(text).scheme.lower() if "://" in text else ""
    if scheme in URL_SCHEMES:
        return
    rest = text.split("://", 1)[1] if scheme else text
    meant = f"unix://{rest}" if rest.startswith("/") else f"redis://{rest}"
    hint = f"did you mean {mask_url(meant)!r}?"
    raise _url_error(text, f"not a Redis URL ({hint})")


def _url_error(url: str, reason: str) -> ConfigurationError:
    shown = mask_url(url) if "://" in url else mask_url(f"redis://{url}")[len("redis://") :]
    error = ConfigurationError(
        f"REDIS_URL {shown!r}: {reason}. Use redis://[user:password@]host:port/db "
        "(TLS: rediss://; a socket: unix:///path/to/redis.sock; a cluster: "
        "redis+cluster://host:port[,host:port...]; sentinels: "
        f"{sentinel.FORM})."
    )
    report_if_it_stops_the_crawl(error)
    return error


def is_cluster(client: Any) -> bool:
    """Whether ``client`` talks to a Redis Cluster (keys used by one script or one
    MULTI must then share a hash slot: see :mod:`scrapy_redis.store.keys`)."""
    return isinstance(client, RedisCluster)


def one_slot(client: Any, keys: Sequence[str]) -> bool:
    """Whether one script (or MULTI) of ``client`` may use ``keys``: always, but on a
    Redis Cluster only if they hash to one slot."""
    return not is_cluster(client) or len({key_slot(key.encode()) for key in keys}) <= 1


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster (``redis+cluster://`` or ``rediss+cluster://``)."""
    return urlsplit(str(url)).scheme.lower() in CLUSTER_SCHEMES


def _is_cluster_class(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, RedisCluster)


def cluster_from_url(
    url: str, cls: type[RedisCluster] = RedisCluster, **kwargs: Any
) -> RedisCluster:
    """A cluster client for ``redis+cluster://[user:password@]host:port[,host:port...][/0][?opts]``:
    every node listed is a startup node (any one reachable will do); the options are those
    of a ``redis://`` URL (``rediss+cluster://``: TLS). A cluster has database 0 only."""
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    database = parts.path.strip("/")
    if database not in ("", "0") or kwargs.pop("db", 0) not in (0, None):
        raise ConfigurationError(
            f"{mask_url(url)}: a Redis Cluster has database 0 only. Remove the database from "
            "REDIS_URL (and REDIS_DB), or give each crawl its own key names instead."
        )
    nodes = [_cluster_node(address) for address in hosts.split(",") if address.strip()]
    if not nodes:
        raise ConfigurationError(f"{mask_url(url)} names no cluster node: REDIS_URL = "
                                 "'redis+cluster://host:port[,host:port...]'.")  # fmt: skip
    first = f"{userinfo}@{nodes[0].host}:{nodes[0].port}" if userinfo else nodes[0].name
    plain = urlunsplit((CLUSTER_SCHEMES[parts.scheme.lower()], first, "", parts.query, ""))
    try:  # redis-py reads the cluster's slots here, from the first node that answers
        return cls.from_url(plain, startup_nodes=nodes, **kwargs)
    except (RedisClusterException, redis.ConnectionError, redis.TimeoutError) as exc:
        error = RedisUnavailableError(
            f"Cannot connect to the Redis Cluster at {mask_url(url)}: {str(exc).rstrip('.')}. "
            "Check REDIS_URL (the nodes listed, any one reachable will do) and that the "
            "cluster is up (cluster_state:ok)."
        )
        report_if_it_stops_the_crawl(error)
        raise error from None


def _cluster_node(address: str) -> ClusterNode:
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit():
        host, port = address.strip(), "6379"
    node: ClusterNode = _untyped(ClusterNode)(host.strip("[]"), int(port))
    return node


def mask_url(url: str) -> str:
    """``url`` with its password masked."""
    parts = urlsplit(str(url))
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if not at:
        return str(url)
    user, colon, _ = userinfo.partition(":")
    netloc = f"{user}:***@{hosts}" if colon else f"***@{hosts}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def get_redis_from_crawler(crawler: Crawler) -> redis.Redis[Any]:
    """The client shared by all scrapy-redis components of ``crawler``, checked with
    a ``PING`` (:func:`from_settings` looked up at call time, so patches apply)."""
    client = from_settings(crawler.settings)
    ensure_reachable(client)
    return client


def _new_client(params: dict[str, Any]) -> redis.Redis[Any]:
    """:func:`get_redis`, with the identity check on every connection when it can be
    hooked (clients of redis.Redis, RedisCluster and their subclasses)."""
    redis_cls = params.get("redis_cls", defaults.REDIS_CLS)
    cluster = _is_cluster_class(redis_cls) or is_cluster_url(params.get("url") or "")
    if not cluster and not (isinstance(redis_cls, type) and issubclass(redis_cls, redis.Redis)):
        return get_redis(**params)
    identity = ServerIdentity()
    user_callback = params.get("redis_connect_func")
    params["redis_connect_func"] = identity.on_connect(user_callback, cluster)
    client = get_redis(**params)
    remember_identity(client, identity)
    return client


def ensure_reachable(client: redis.Redis[Any]) -> None:
    """Raise :class:`RedisUnavailableError`, naming the server, if ``client`` cannot PING.

    If that error stops the crawl, it is logged as one line, not as asyncio's
    traceback (see bootstrap.py).
    """
    if not callable(getattr(client, "ping", None)):
        return  # a test's stand-in for the client, without ping(): nothing to reach
    try:
        client.ping()
        cluster_node = not isinstance(client, RedisCluster) and _is_cluster_node(client)
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        where = describe_server(client)
        error = RedisUnavailableError(
            f"Cannot connect to Redis at {where}: {str(exc).rstrip('.')}. "
            "Check REDIS_URL "
            "(or REDIS_HOST / REDIS_PORT / REDIS_PARAMS) and that the server is running."
            f"{connection_hint(where, exc)}"
        )
        report_if_it_stops_the_crawl(error)
        raise error from None
    except redis.ResponseError as exc:  # the handshake refused: SELECT, AUTH, HELLO
        raise refused_at_connect(client, exc) from None
    if cluster_node:
        where = describe_server(client)
        host_port = where.split("://", 1)[1].split("@")[-1].rsplit("/", 1)[0]
        scheme = "rediss+cluster" if where.startswith("rediss") else "redis+cluster"
        misdirected = ConfigurationError(
            f"{where} is a node of a Redis Cluster: a plain client would fail on every key "
            f"held by another node (MOVED). Set REDIS_URL = '{scheme}://{host_port}' (more "
            "nodes may follow, comma-separated) to use the cluster."
        )
        report_if_it_stops_the_crawl(misdirected)
        raise misdirected


def refused_at_connect(client: Any, exc: redis.ResponseError) -> ConfigurationError:
    """The error, naming the fix, of a server refusing a new connection (reported as one
    line if it stops the crawl)."""
    where, text = describe_server(client), str(exc).rstrip(".")
    if "DB index is out of range" in text:
        database = where.rsplit("/", 1)[-1]
        error = ConfigurationError(
            f"Redis at {where} has no database {database}: REDIS_URL's /db (or REDIS_DB) "
            "must be below the server's 'databases' setting (16 by default; a Redis Cluster "
            "has database 0 only)."
        )
    else:
        error = ConfigurationError(
            f"Redis at {where} refused the connection: {text}. Check the user and password "
            f"in REDIS_URL (or REDIS_PARAMS){permissions.acl_hint(client, exc)}."
        )
    report_if_it_stops_the_crawl(error)
    return error


def _is_cluster_node(client: Any) -> bool:
    """Whether the server of a plain client runs in cluster mode (False if INFO is denied)."""
    try:
        info = client.info("cluster")
    except (redis.ResponseError, AttributeError):  # AttributeError: a stand-in without info()
        return False
    # (a client of one's own, or a test's stand-in, may answer anything else)
    return isinstance(info, dict) and str(info.get("cluster_enabled")) == "1"


def _untyped(value: Any) -> Any:
    """``value``, for calls into redis-py's unannotated cluster code (mypy strict)."""
    return value
