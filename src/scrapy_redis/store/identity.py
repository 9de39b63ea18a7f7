"""Which server a client's connections reached (``run_id``, ``master_replid``), read on
every connection of the clients :func:`scrapy_redis.connection.get_redis_from_settings`
builds: a change means the server was restarted, restored or failed over."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import redis


class ServerIdentity:
    """The identity (``run_id``, ``master_replid``) of the server a client's connections
    reached. ``changes`` counts how often it differed from the one before (or could
    not be read): the server was restarted, restored from a dump or failed over, so
    its data may be older than what was read from it before."""

    def __init__(self) -> None:
        self.changes = 0
        self._last: tuple[str, str] | None = None
        #: A cluster client's nodes (``host:port``) -> the identity last read there.
        self._nodes: dict[str, tuple[str, str] | None] = {}
        self._lock = threading.Lock()

    def observe(self, identity: tuple[str, str] | None) -> None:
        with self._lock:
            if identity is None or (self._last is not None and identity != self._last):
                self.changes += 1
            self._last = identity

    def observe_node(self, node: str, identity: tuple[str, str] | None) -> None:
        """A cluster client's connection to ``node``: a node not connected to before (a
        replica promoted by a failover, or a first connection) or with another identity
        counts as a change: the data behind some slots may be older than what was read."""
        with self._lock:
            if identity is None or self._nodes.get(node, ()) != identity:
                self.changes += 1
            self._nodes[node] = identity

    def on_connect(
        self, user_callback: Callable[[Any], None] | None, cluster: bool = False
    ) -> Callable[[Any], None]:
        """A ``redis_connect_func`` that handshakes as usual, then reads the identity (of
        each node, for a cluster client)."""

        def connected(conn: Any) -> None:
            if user_callback is not None:
                user_callback(conn)
            else:
                conn.on_connect()
            identity = _read_identity(conn)
            if cluster:
                self.observe_node(
                    f"{getattr(conn, 'host', '')}:{getattr(conn, 'port', '')}", identity
                )
            else:
                self.observe(identity)

        return connected


#: A client -> the identity of its server (clients built by get_redis_from_settings).
_identities: weakref.WeakKeyDictionary[Any, ServerIdentity] = weakref.WeakKeyDictionary()


def remember_identity(client: Any, identity: ServerIdentity) -> None:
    """Record ``identity`` as that of ``client``'s server (a client just built)."""
    _identities[client] = identity


def server_identity(client: Any) -> ServerIdentity:
    """The :class:`ServerIdentity` of ``client`` (one that never changes if it was not
    built by :func:`get_redis_from_settings`)."""
    try:
        identity = _identities.get(client)
    except TypeError:  # not weakly referenceable
        identity = None
    return identity if identity is not None else ServerIdentity()


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
