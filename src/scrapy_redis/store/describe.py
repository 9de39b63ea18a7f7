"""Naming the server a client talks to, for messages: a URL with any password masked,
and what else to check when connecting to it failed."""

from __future__ import annotations

from typing import Any

from redis.cluster import RedisCluster

from scrapy_redis.store import sentinel


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
    """A URL naming the server ``client`` talks to, with any password masked (a cluster:
    ``redis+cluster://`` and the nodes it knows; sentinels: ``redis+sentinel://``)."""
    if isinstance(client, RedisCluster):
        return _describe_cluster(client)
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


def _describe_cluster(client: RedisCluster) -> str:
    nodes = sorted({(node.host, int(node.port)) for node in _nodes(client)})
    kwargs = getattr(client.nodes_manager, "connection_kwargs", {}) or {}
    connection_class = kwargs.get("connection_class")
    tls = kwargs.get("ssl") or "SSL" in getattr(connection_class, "__name__", "")
    auth = f"{kwargs.get('username') or ''}:***@" if kwargs.get("password") else ""
    hosts = ",".join(f"{host}:{port}" for host, port in nodes)
    return f"{'rediss' if tls else 'redis'}+cluster://{auth}{hosts}"


def _nodes(client: RedisCluster) -> Any:
    """The cluster's nodes (redis-py's cluster code is unannotated: mypy strict)."""
    nodes: Any = client.get_nodes()
    return nodes
