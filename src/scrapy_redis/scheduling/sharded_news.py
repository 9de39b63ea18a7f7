"""Listening to the news channels of a crawl on a Redis Cluster
(see :mod:`scrapy_redis.scheduling.wakeup`).

There the news go on sharded channels (``SPUBLISH``, Redis >= 7.0), one per lane, in
the lane's hash slot (:func:`scrapy_redis.store.keys.news_channel`): only the master serving
that slot (and its replicas) gets them, where a classic ``PUBLISH`` is sent on to every
node of the cluster. An idle worker listens to every lane's channel, on each master.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from scrapy_redis.scheduling.wakeup import NewsListener

logger = logging.getLogger(__name__)


class ShardedNewsListener:
    """On a Redis Cluster: listens to sharded channels (every lane's news channel), each
    on the master serving its slot, a :class:`NewsListener` (a thread and a connection)
    per master. :meth:`start` finds their masters again (from the client's map of the
    slots), so that after a failover it listens on the new master."""

    def __init__(
        self,
        cluster: Any,
        channels: Sequence[str],
        on_news: Callable[[], None],
        reactor: Any = None,
    ) -> None:
        self.cluster = cluster
        self.channels = list(channels)
        self.on_news = on_news
        self.reactor = reactor
        self._stopped = False
        self._listeners: dict[str, NewsListener] = {}

    def start(self) -> None:
        """Listen on each master (see :meth:`NewsListener.start`), unless stopped."""
        if self._stopped:
            return
        try:
            masters = self._masters()
        except Exception:  # the slots not served now (a failover): polling remains
            logger.debug("Cannot find the masters of %s", self.channels, exc_info=True)
            return
        for name in set(self._listeners) - set(masters):
            self._listeners.pop(name).stop()
        for name, (node, channels) in masters.items():
            listener = self._listeners.get(name)
            if listener is None or listener.channels != channels:
                if listener is not None:
                    listener.stop()
                client = self.cluster.get_redis_connection(node)
                listener = NewsListener(client, channels, self.on_news, self.reactor, True)
                self._listeners[name] = listener
            listener.start()

    def _masters(self) -> dict[str, tuple[Any, list[str]]]:
        """Per master (by name): the node and the channels in its slots."""
        masters: dict[str, tuple[Any, list[str]]] = {}
        for channel in self.channels:
            node = self.cluster.get_node_from_key(channel)
            masters.setdefault(node.name, (node, []))[1].append(channel)
        return masters

    @property
    def listeners(self) -> list[NewsListener]:
        """The listener of each master (as of the last :meth:`start`)."""
        return list(self._listeners.values())

    def stop(self) -> None:
        self._stopped = True
        for listener in self._listeners.values():
            listener.stop()

    def join(self, timeout: float | None = None) -> None:
        for listener in self._listeners.values():
            listener.join(timeout)
