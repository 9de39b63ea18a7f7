"""Waking Scrapy's engine when the shared queue gets requests while this worker idles.

Two ways, together: a :class:`QueueWatcher` polls with a growing interval,
and a :class:`NewsListener` thread, subscribed to the queue's news channel,
makes it look at once when another worker announces news (requests pushed, or
its last leases released). The poll alone is enough; the news make it prompt.

On a Redis Cluster the news go on sharded channels (``SPUBLISH``, Redis >= 7),
one per lane in the lane's slot, which only the master of that slot serves
(a classic ``PUBLISH`` is sent to every node of the cluster): a
:class:`~scrapy_redis.scheduling.sharded_news.ShardedNewsListener` listens to every lane's,
a :class:`NewsListener` per master.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import RedisError

from scrapy_redis.core.engine import installed_reactor
from scrapy_redis.store.keys import news_channel
from scrapy_redis.store.outage import OUTAGE_ERRORS

logger = logging.getLogger(__name__)
#: The scheduler's parts log as the scheduler.
scheduler_logger = logging.getLogger("scrapy_redis.scheduler")


class NewsChannel:
    """The queue's news channel: a worker publishes there when it pushed requests (from
    the push script), released its last leases (``idle``), gave requests back
    (``returned``) or put back a dead worker's (``recovered``), and idle workers look
    at once. Given up (:attr:`name` empty) when the server refuses it, e.g. an ACL
    user without access to the channel, or ``SPUBLISH`` on a Redis Cluster older than
    7.0: idle workers then notice by polling.

    ``sharded`` (on a Redis Cluster): ``SPUBLISH`` on :attr:`name`, and listeners
    ``SSUBSCRIBE`` to every channel of ``listened`` (every lane's; see keys.news_channel).
    """

    def __init__(
        self,
        server: Any,
        name: str,
        spider: Any = None,
        sharded: bool = False,
        listened: Sequence[str] = (),
    ) -> None:
        self.server = server
        self.name = name
        self.spider = spider
        self.sharded = sharded
        #: The channels idle workers listen to: :attr:`name`, or on a cluster every lane's.
        self.listened = list(listened) or [name]

    def of_queue(self, queue_key: str) -> NewsChannel:
        """Where the feed of the queue ``queue_key`` (a lane) publishes: this channel; on
        a Redis Cluster the lane's own, served by the master its feed talks to (workers
        listen to every lane's channel, so one message reaches them all)."""
        if not self.sharded:
            return self
        # an object of its own even for the scheduler's channel: a feed that gives up
        # its news (refused) must not silence the push scripts' announcements
        return NewsChannel(self.server, news_channel(queue_key, cluster=True), self.spider, True)

    def publish(self, news: str) -> None:
        if not self.name:
            return
        try:
            if self.sharded:
                self.server.spublish(self.name, news)
            else:
                self.server.publish(self.name, news)
        except OUTAGE_ERRORS:
            raise  # the caller's outage handling (news are not kept: polling finds them)
        except RedisError as exc:  # refused, or unknown (redis-py's cluster client says so)
            scheduler_logger.debug(
                "Cannot publish on %(channel)s (%(error)s): idle workers will notice by polling.",
                {"channel": self.name, "error": exc},
                extra={"spider": self.spider},
            )
            self.name = ""


class QueueWatcher:
    """While this worker idles, checks for news with a growing interval and wakes the engine.

    Scrapy asks the scheduler for requests when a download ends or every 5 s;
    requests another worker pushes meanwhile, or the end of the other workers'
    work (time to close), would wait for that. The watcher calls ``has_news``
    after 0.1 s, then doubling up to 2 s, and ``wake`` as soon as it says True.
    ``on_start`` runs when watching starts (to take a baseline).
    """

    FIRST, LAST = 0.1, 2.0

    def __init__(
        self,
        has_news: Callable[[], bool],
        wake: Callable[[], None],
        clock: Any = None,
        on_start: Callable[[], None] | None = None,
    ) -> None:
        self.has_news = has_news
        self.wake = wake
        self.on_start = on_start
        self.clock = clock
        self.interval = self.FIRST
        self._call: Any = None

    def watch(self) -> None:
        if self._call is None:
            if self.on_start is not None and self.interval == self.FIRST:
                self.on_start()
            if self.clock is None:
                self.clock = installed_reactor()
            self._call = self.clock.callLater(self.interval, self._check)

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self.interval = self.FIRST

    def notify(self) -> None:
        """News from another worker: check now rather than at the next poll."""
        call = self._call
        due_later = call is not None and call.active() and call.getTime() > self.clock.seconds()
        if due_later:
            call.reset(0)

    def _check(self) -> None:
        self._call = None
        try:
            news = self.has_news()
        except Exception:  # look again later
            logger.debug("Queue check failed", exc_info=True)
            news = False
        if news:
            self.stop()
            self.wake()
            return
        self.interval = min(self.interval * 2, self.LAST)
        self.watch()


class NewsListener:
    """A daemon thread subscribed to a pub/sub channel; ``on_news`` runs on the reactor
    thread for each message.

    Started when the worker first idles; ``stop()`` returns at once and the
    thread ends within ``WAIT`` seconds. If the subscription fails (a proxy
    without pub/sub, a lost connection, an ACL without the channel) it logs at
    DEBUG and ends: the watcher's polling still finds the news, and the next
    ``start()`` at least ``RETRY`` seconds later listens again. A listener that
    had been listening for ``LISTENED`` seconds when its connection was lost (a
    restart or failover of Redis: the new master takes subscriptions) listens
    again at the next ``start()``.

    ``sharded``: ``SSUBSCRIBE`` to ``channel`` (one name or several, served by the
    master ``server`` of one Redis Cluster: see :mod:`scrapy_redis.scheduling.sharded_news`), one
    channel a call (a call's channels must share a slot). When their slot moves (a
    failover), the server unsubscribes the listener: it ends, and listens again (where
    the slot is now) at the next ``start()``.
    """

    WAIT = 1.0
    RETRY = 30.0
    LISTENED = 5.0

    def __init__(
        self,
        server: Any,
        channel: str | Sequence[str],
        on_news: Callable[[], None],
        reactor: Any = None,
        sharded: bool = False,
    ) -> None:
        self.server = server
        self.channels = [channel] if isinstance(channel, str) else list(channel)
        #: The channel (channels, comma-separated), as the thread's name and logs show it.
        self.channel = ", ".join(self.channels)
        self.on_news = on_news
        self.reactor = reactor
        self.sharded = sharded
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at = 0.0
        self._listening_since: float | None = None

    def start(self) -> None:
        """Listen, unless listening already, stopped, or the last try was under RETRY s ago."""
        if self._stopped.is_set():
            return
        thread = self._thread
        recent = time.monotonic() - self._started_at < self.RETRY
        if thread is not None and (thread.is_alive() or recent):
            return
        reactor = self.reactor if self.reactor is not None else installed_reactor()
        self._thread = threading.Thread(
            target=self._listen, args=(reactor,), name=f"news {self.channel}", daemon=True
        )
        self._started_at = time.monotonic()
        self._thread.start()

    @property
    def thread(self) -> threading.Thread | None:
        """The listening thread of the last :meth:`start` (None before)."""
        return self._thread

    @property
    def listening_since(self) -> float | None:
        """``time.monotonic()`` when the thread's subscription was confirmed (None while
        it is not subscribed): what ``LISTENED`` is counted from."""
        return self._listening_since

    def stop(self) -> None:
        self._stopped.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _listen(self, reactor: Any) -> None:
        pubsub, subscribed_at = None, None
        try:
            pubsub = self.server.pubsub()
            self._subscribe(pubsub)
            subscribed_at = self._listening_since = time.monotonic()
            while not self._stopped.is_set():
                kind = self._next(pubsub)
                if kind in ("message", "smessage"):
                    reactor.callFromThread(self.on_news)
                elif kind == "sunsubscribe":  # its slot moved: listen where it is now
                    self._started_at = 0.0
                    return
        except Exception:  # polling remains
            if not self._stopped.is_set():
                logger.debug("Not listening to %s any more", self.channel, exc_info=True)
            if subscribed_at is not None and time.monotonic() - subscribed_at >= self.LISTENED:
                self._started_at = 0.0  # it worked a while: listen again at the next start()
        finally:
            self._listening_since = None
            if pubsub is not None:
                with contextlib.suppress(Exception):  # the connection is gone already
                    pubsub.close()

    def _subscribe(self, pubsub: Any) -> None:
        if not self.sharded:
            pubsub.subscribe(*self.channels)
            return
        for channel in self.channels:
            pubsub.ssubscribe(channel)

    def _next(self, pubsub: Any) -> str | None:
        """The type of the next message within WAIT s (None: none, or stopped meanwhile)."""
        message = pubsub.get_message(timeout=self.WAIT)
        if message is None or self._stopped.is_set():
            return None
        return str(message["type"])
