"""Redis clients built from Scrapy settings.

One client, hence one connection pool, is shared by every scrapy-redis
component of a crawler (scheduler, dupefilter, pipeline, stats, spider):
:func:`get_redis_from_settings` (alias :func:`from_settings`) returns the
client built for that settings object (a new one if its Redis settings
changed). Each component looks its client up through the same module-level
name the original used, so tests that patch those names keep working.

Every connection such a client opens reads the server's ``run_id`` and
``master_replid`` first: :func:`server_identity` counts how often they changed,
so that what a worker remembers of the server's data (the scheduler's seen
cache) is dropped when the server restarted, was restored or failed over.
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from scrapy_redis import defaults, sentinel
from scrapy_redis.bootstrap import report_if_it_stops_the_crawl
from scrapy_redis.exceptions import ConfigurationError, RedisUnavailableError
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
        params["redis_cls"] = load_configured('REDIS_PARAMS["redis_cls"]', params["redis_cls"])
    if settings.getdict("REDIS_SENTINEL_PARAMS"):
        params["sentinel_kwargs"] = settings.getdict("REDIS_SENTINEL_PARAMS")
    return params


def get_redis_from_settings(settings: BaseSettings) -> redis.Redis[Any]:
    """The Redis client configured by ``settings``, shared by all its callers.

    The first call for a settings object builds the client; later calls with the
    same object return it, unless its Redis settings changed in between.
    """
    signature = _redis_settings_signature(settings)
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


def _redis_settings_signature(settings: BaseSettings) -> str:
    """The settings a client is built from, as text (objects by identity)."""
    params = sorted(settings.getdict("REDIS_PARAMS").items(), key=str)
    sentinel_params = sorted(settings.getdict("REDIS_SENTINEL_PARAMS").items(), key=str)
    return repr((params, [settings.get(name) for name in SETTINGS_PARAMS_MAP], sentinel_params))


#: Backwards compatible alias.
from_settings = get_redis_from_settings


def get_redis(**kwargs: Any) -> redis.Redis[Any]:
    """A new client: ``redis_cls.from_url(url, ...)`` if ``url`` is given, else ``redis_cls(...)``.

    Options in the URL win over keyword arguments.
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
        return redis_cls.from_url(url, **kwargs)  # type: ignore[no-any-return]
    return redis_cls(**kwargs)  # type: ignore[no-any-return]


def get_redis_from_crawler(crawler: Crawler) -> redis.Redis[Any]:
    """The client shared by all scrapy-redis components of ``crawler``, checked with
    a ``PING`` (:func:`from_settings` looked up at call time, so patches apply)."""
    client = from_settings(crawler.settings)
    ensure_reachable(client)
    return client


class ServerIdentity:
    """The identity (``run_id``, ``master_replid``) of the server a client's connections
    reached. ``changes`` counts how often it differed from the one before (or could
    not be read): the server was restarted, restored from a dump or failed over, so
    its data may be older than what was read from it before."""

    def __init__(self) -> None:
        self.changes = 0
        self._last: tuple[str, str] | None = None
        self._lock = threading.Lock()

    def observe(self, identity: tuple[str, str] | None) -> None:
        with self._lock:
            if identity is None or (self._last is not None and identity != self._last):
                self.changes += 1
            self._last = identity

    def on_connect(self, user_callback: Callable[[Any], None] | None) -> Callable[[Any], None]:
        """A ``redis_connect_func`` that handshakes as usual, then reads the identity."""

        def connected(conn: Any) -> None:
            if user_callback is not None:
                user_callback(conn)
            else:
                conn.on_connect()
            self.observe(_read_identity(conn))

        return connected


#: A client -> the identity of its server (clients built by get_redis_from_settings).
_identities: weakref.WeakKeyDictionary[Any, ServerIdentity] = weakref.WeakKeyDictionary()


def server_identity(client: Any) -> ServerIdentity:
    """The :class:`ServerIdentity` of ``client`` (one that never changes if it was not
    built by :func:`get_redis_from_settings`)."""
    try:
        identity = _identities.get(client)
    except TypeError:  # not weakly referenceable
        identity = None
    return identity if identity is not None else ServerIdentity()


def _new_client(params: dict[str, Any]) -> redis.Redis[Any]:
    """:func:`get_redis`, with the identity check on every connection when it can be
    hooked (clients of redis.Redis and its subclasses)."""
    redis_cls = params.get("redis_cls", defaults.REDIS_CLS)
    if not (isinstance(redis_cls, type) and issubclass(redis_cls, redis.Redis)):
        return get_redis(**params)
    identity = ServerIdentity()
    params["redis_connect_func"] = identity.on_connect(params.get("redis_connect_func"))
    client = get_redis(**params)
    _identities[client] = identity
    return client


def _read_identity(conn: Any) -> tuple[str, str] | None:
    """``run_id`` and ``master_replid`` of the server ``conn`` is connected to (None if
    the user may not run INFO)."""
    conn.send_command("INFO", "server")
    conn.send_command("INFO", "replication")
    fields: dict[str, str] = {}
    denied = False
    for _ in range(2):
        try:
            text = conn.read_response()
        except redis.ResponseError:
            denied = True
            continue
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        for line in str(text).splitlines():
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    if denied or "run_id" not in fields:
        return None
    return fields["run_id"], fields.get("master_replid", "")


def ensure_reachable(client: redis.Redis[Any]) -> None:
    """Raise :class:`RedisUnavailableError`, naming the server, if ``client`` cannot PING.

    If that error stops the crawl, it is logged as one line, not as asyncio's
    traceback (see bootstrap.py).
    """
    try:
        client.ping()
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


def connection_hint(where: str, exc: BaseException) -> str:
    """More to check when connecting to ``where`` failed with ``exc`` (TLS, Sentinel)."""
    text = str(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return (
            " The server's TLS certificate is not trusted: give the CA that signed it as "
            "ssl_ca_certs, in REDIS_URL (?ssl_ca_certs=/path/to/ca.crt) or in REDIS_PARAMS."
        )
    if where.startswith("rediss") and ("EOF" in text or "alert" in text.lower()):
        return (
            " The server closed the TLS handshake: if it requires client certificates "
            "(tls-auth-clients), give ssl_certfile and ssl_keyfile (REDIS_URL or REDIS_PARAMS)."
        )
    if "+sentinel://" in where:
        return (
            " The sentinels must answer and know the master by that name "
            "(sentinel credentials and TLS go in REDIS_SENTINEL_PARAMS)."
        )
    return ""


def describe_server(client: Any) -> str:
    """A URL naming the server ``client`` talks to, with any password masked."""
    through_sentinels = sentinel.describe(client)
    if through_sentinels is not None:
        return through_sentinels
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
