"""The news channels on a real Redis Cluster (the ``redis_cluster`` fixture): sharded pub/sub
(``SPUBLISH``/``SSUBSCRIBE``), a channel per lane in the lane's slot, which only the master
serving that slot (and its replicas) gets; what a worker does where the server refuses it."""

from __future__ import annotations

import contextlib
import logging
import queue
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster
from scrapy import Request
from twisted.internet.task import Clock

from helpers import stand_in_engine
from redis_cluster import RedisClusterNodes, running
from scrapy_redis.scheduling.sharded_news import ShardedNewsListener
from scrapy_redis.scheduling.wakeup import NewsListener
from scrapy_redis.store.keys import lane_tags, news_channel
from test_cluster import scheduler_settings


class ThreadedClock(Clock):
    """A ``task.Clock`` that also takes calls from other threads (Twisted's
    ``callFromThread``, which the news listeners use); the test runs them (run_handed)."""

    def __init__(self) -> None:
        super().__init__()
        self.handed: queue.Queue[tuple[Callable[..., Any], tuple]] = queue.Queue()

    def callFromThread(self, func: Callable[..., Any], *args: Any) -> None:  # Twisted's name
        self.handed.put((func, args))

    def run_handed(self, timeout: float = 5.0) -> None:
        """Run the next call handed over by another thread, waiting up to ``timeout`` s."""
        func, args = self.handed.get(timeout=timeout)
        func(*args)


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def shard_subscribers(port: int, channel: str) -> int:
    """``PUBSUB SHARDNUMSUB`` of ``channel`` on the node at ``port`` (its own clients)."""
    with redis.Redis(port=port, socket_timeout=1) as client:
        return int(client.execute_command("PUBSUB", "SHARDNUMSUB", channel)[1])


def command_calls(nodes: RedisClusterNodes, command: str) -> dict[int, int]:
    """Per running node (port), how many times ``command`` ran since its last CONFIG RESETSTAT
    (commands of scripts included)."""
    calls = {}
    for node in nodes.running():
        with redis.Redis(port=node.port, socket_timeout=1) as client:
            stats = client.info("commandstats")
        calls[node.port] = int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
    return calls


def reset_stats(nodes: RedisClusterNodes) -> None:
    for node in nodes.running():
        with redis.Redis(port=node.port, socket_timeout=1) as client:
            client.config_resetstat()


def bus_messages(nodes: RedisClusterNodes) -> dict[int, dict[str, int]]:
    """Per running node (port), its counts of pub/sub messages sent and received over the
    cluster bus (``cluster_stats_messages_publish[shard]_{sent,received}``, CLUSTER INFO)."""
    counts = {}
    for node in nodes.running():
        with redis.Redis(port=node.port, socket_timeout=1) as client:
            info = client.execute_command("CLUSTER INFO")
        if not isinstance(info, dict):  # a redis-py that does not parse it
            text = info.decode() if isinstance(info, bytes) else str(info)
            info = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        counts[node.port] = {
            str(name).removeprefix("cluster_stats_messages_"): int(value)
            for name, value in info.items()
            if str(name).startswith("cluster_stats_messages_publish")
        }
    return counts


def bus_messages_since(nodes: RedisClusterNodes, before: dict) -> dict[int, dict[str, int]]:
    """The bus messages counted since ``before`` (bus_messages()), per node, non-zero only."""
    now = bus_messages(nodes)
    since = {}
    for port, counts in now.items():
        grown = {k: n - before.get(port, {}).get(k, 0) for k, n in counts.items()}
        if any(grown.values()):
            since[port] = {k: n for k, n in grown.items() if n}
    return since


def idle_and_busy(schedulers, settings: dict) -> tuple[Any, Any, ThreadedClock, list[float]]:
    """Two workers of one crawl: one idle (its timers and news on a test clock; the
    times it woke the engine in the list), one to push."""
    clock, wakes = ThreadedClock(), []
    idle = schedulers(settings, reactor=clock)
    busy = schedulers(settings)
    stand_in_engine(idle, wake=lambda: wakes.append(clock.seconds()))
    return idle, busy, clock, wakes


def test_an_idle_worker_is_woken_through_the_sharded_channel_of_a_lane(
    redis_cluster, cluster, schedulers
):
    idle, busy, clock, wakes = idle_and_busy(schedulers, scheduler_settings(redis_cluster.url))
    channels = [news_channel(lane.key, cluster=True) for lane in idle.queue.lanes]
    assert channels == [f"{{{tag}}}:news" for tag in lane_tags("demo:requests", 3)]
    masters = [redis_cluster.master_of(channel) for channel in channels]
    assert len({master.port for master in masters}) == 3  # a lane's channel on each master

    assert idle.next_request() is None  # idles: listens to every lane's channel
    for channel, master in zip(channels, masters, strict=True):  # on its master only
        wait_for(lambda c=channel, m=master: shard_subscribers(m.port, c) == 1)
        others = [node for node in redis_cluster.masters() if node.port != master.port]
        assert [shard_subscribers(node.port, channel) for node in others] == [0, 0]
    assert cluster.pubsub_numsub("demo:requests:news") == [(b"demo:requests:news", 0)]
    reset_stats(redis_cluster)
    bus_before = bus_messages(redis_cluster)

    busy.enqueue_request(Request("http://example.com/a"))
    assert busy.send_enqueued()
    clock.run_handed()  # the push script's news, from the listener on the lane's master
    clock.advance(0)
    assert wakes == [0]  # at once: the watcher's first look was due at 0.1 s
    (lane,) = [n for n, lane in enumerate(busy.queue.lanes) if cluster.exists(lane.key)]
    master = masters[lane]
    (replica,) = [node for node in redis_cluster.shard_of(master) if node is not master]
    spublish = command_calls(redis_cluster, "spublish")
    assert spublish[master.port] == 1
    assert all(calls == 0 for port, calls in spublish.items() if port != master.port)
    assert set(command_calls(redis_cluster, "publish").values()) == {0}
    # Over the cluster bus only to the master's replica (a PUBLISH goes to every node).
    assert bus_messages_since(redis_cluster, bus_before) == {
        master.port: {"publishshard_sent": 1},
        replica.port: {"publishshard_received": 1},
    }
    assert idle.next_request().url == "http://example.com/a"


def test_client_news_go_on_the_lanes_own_channel(redis_cluster, cluster, schedulers):
    """A worker that released its last leases of a lane says so (``idle``) on that lane's
    channel, on the master its feed talks to; idle workers listen to every lane's."""
    settings = scheduler_settings(redis_cluster.url)
    idle, busy, clock, wakes = idle_and_busy(schedulers, settings)
    in_progress = stand_in_engine(busy)
    busy.enqueue_request(Request("http://example.com/a"))
    assert busy.send_enqueued()
    in_progress.add(busy.next_request())  # leased by the busy worker
    (lane,) = [lane for lane in busy.queue.lanes if cluster.exists(f"{lane.key}:leases")]
    channel = news_channel(lane.key, cluster=True)
    assert idle.next_request() is None  # idles: others hold leases
    master = redis_cluster.master_of(channel)
    wait_for(lambda: shard_subscribers(master.port, channel) == 1)
    reset_stats(redis_cluster)
    in_progress.clear()
    assert busy.next_request() is None  # releases its lease: "idle" on the lane's channel
    clock.run_handed()
    clock.advance(0)
    assert wakes == [0]  # time to re-check idleness (and close)
    assert command_calls(redis_cluster, "spublish")[master.port] == 1
    assert set(command_calls(redis_cluster, "publish").values()) == {0}


def test_after_a_failover_the_idle_worker_listens_on_the_new_master(
    redis_cluster, cluster, schedulers
):
    """CLUSTER FAILOVER: the old master unsubscribes the listeners of its slots'
    channels; the next time the worker idles it listens on the new master."""
    settings = {**scheduler_settings(redis_cluster.url), "SCHEDULER_SHARDS": 1}
    idle, busy, clock, wakes = idle_and_busy(schedulers, settings)
    channel = news_channel("demo:requests", cluster=True)
    assert channel == "{demo:requests}:news"  # in the queue's slot
    assert idle.next_request() is None
    old = redis_cluster.master_of(channel)
    wait_for(lambda: shard_subscribers(old.port, channel) == 1)

    new = redis_cluster.fail_over(old)
    wait_for(lambda: shard_subscribers(old.port, channel) == 0)  # unsubscribed by the server
    assert idle.next_request() is None  # redirected: its client learns the new master
    wait_for(lambda: shard_subscribers(new.port, channel) == 1)
    while not clock.handed.empty():  # news handed over before (none expected, none harmful)
        clock.run_handed()
    busy.enqueue_request(Request("http://example.com/a"))
    assert busy.send_enqueued()
    clock.run_handed()
    clock.advance(0)
    assert wakes == [0]
    assert idle.next_request().url == "http://example.com/a"


def test_a_listener_unsubscribed_by_a_failover_ends_and_listens_again_at_once(
    redis_cluster, cluster
):
    """The old master drops the subscriptions of the slots it lost: the listener of that
    master ends, and the next start() listens again at once (not RETRY seconds later),
    wherever the client's map of the slots says the channel is."""
    channel = news_channel("demo:requests", cluster=True)
    heard: list[int] = []
    listener = ShardedNewsListener(cluster, [channel], lambda: heard.append(1), ThreadedClock())
    listener.start()
    old = redis_cluster.master_of(channel)
    wait_for(lambda: shard_subscribers(old.port, channel) == 1)
    (first,) = listener.listeners
    new = redis_cluster.fail_over(old)
    first.join(NewsListener.WAIT + 5)
    assert first.thread is not None and not first.thread.is_alive()
    listener.start()
    wait_for(
        lambda: shard_subscribers(old.port, channel) + shard_subscribers(new.port, channel) == 1
    )
    listener.stop()
    listener.join(NewsListener.WAIT + 5)
    assert all(not each.thread.is_alive() for each in listener.listeners)


def listener_errors(caplog, count: int, timeout: float = 5.0) -> list[BaseException]:
    """What ended the first ``count`` news listeners that stopped listening (logged)."""
    deadline = time.monotonic() + timeout
    while True:
        ended = [r for r in caplog.records if r.getMessage().startswith("Not listening to")]
        if len(ended) >= count or time.monotonic() > deadline:
            return [r.exc_info[1] for r in ended if r.exc_info and r.exc_info[1]]
        time.sleep(0.05)


def polled_without_news(settings: dict, schedulers, caplog) -> list[BaseException]:
    """A crawl whose servers refuse the sharded channels: the pushes, pops and releases
    work, the idle worker is woken by its watcher's poll. Returns what its listeners
    (one per master) were refused."""
    with caplog.at_level(logging.DEBUG, logger="scrapy_redis"):
        idle, busy, clock, wakes = idle_and_busy(schedulers, settings)
        in_progress = stand_in_engine(busy)
        assert idle.next_request() is None  # listens, or tries to
        errors = listener_errors(caplog, len(idle.queue.lanes))
        for n in range(3):
            busy.enqueue_request(Request(f"http://example.com/{n}"))
        assert busy.send_enqueued()  # its push scripts' SPUBLISH refused: pushed all the same
        assert busy.stats.get_value("scheduler/enqueued/redis") == 3
        clock.advance(0.1)
        assert wakes == [pytest.approx(0.1)]  # by polling
        taken = [busy.next_request() for _ in range(3)]
        assert sorted(r.url for r in taken) == [f"http://example.com/{n}" for n in range(3)]
        in_progress.update(taken)
        in_progress.clear()
        assert busy.next_request() is None  # releases its leases: cannot tell
    assert clock.handed.empty()
    assert "Cannot publish on {demo:requests/" in caplog.text
    return errors


def test_a_user_who_may_not_use_the_channels_still_pushes_and_pops(
    redis_cluster, cluster, schedulers, caplog
):
    """An ACL user without channels (Redis 7's default): the news are lost, nothing else."""
    with user_without_channels(redis_cluster) as url:
        errors = polled_without_news(scheduler_settings(url), schedulers, caplog)
        assert len(errors) == 3
        assert all(isinstance(error, redis.exceptions.NoPermissionError) for error in errors)


@contextlib.contextmanager
def user_without_channels(redis_cluster) -> Iterator[str]:
    """The cluster's URL as an ACL user who may use every key and command, no channel."""
    nodes = redis_cluster.running()
    for node in nodes:
        with redis.Redis(port=node.port) as client:
            client.acl_setuser("nopub", enabled=True, passwords=["+pw"], keys=["~*"],
                               commands=["+@all"], reset_channels=True)  # fmt: skip
    try:
        yield redis_cluster.url.replace("redis+cluster://", "redis+cluster://nopub:pw@")
    finally:
        for node in nodes:
            with redis.Redis(port=node.port) as client:
                client.acl_deluser("nopub")


def test_a_lane_whose_news_are_refused_does_not_silence_the_others(redis_cluster, cluster):
    """A feed that gives up its news (the server refused them) gives up its own channel
    only: lane 0's feed has an object of its own, not the crawl's (whose name the push
    scripts of every lane are given)."""
    from scrapy_redis.scheduling.wakeup import NewsChannel

    with user_without_channels(redis_cluster) as url:
        server = RedisCluster.from_url(url.replace("redis+cluster://", "redis://").split(",")[0])
        lanes = [f"{{{tag}}}" for tag in lane_tags("demo:requests", 3)]
        channels = [news_channel(lane, cluster=True) for lane in lanes]
        crawl = NewsChannel(server, channels[0], sharded=True, listened=channels)
        first = crawl.of_queue(lanes[0])
        assert first.name == crawl.name and first is not crawl
        first.publish("idle")  # NOPERM: this feed gives up its news
        assert first.name == "" and crawl.name == channels[0]
        server.close()


@pytest.fixture(scope="module")
def cluster_without_sharded_pubsub():
    """A Redis Cluster whose nodes know no sharded pub/sub, as Redis 6.2's (the commands
    renamed away: unknown, as there)."""
    renamed = ("SPUBLISH", "SSUBSCRIBE", "SUNSUBSCRIBE")
    yield from running(
        RedisClusterNodes(
            extra_args=tuple(arg for name in renamed for arg in ("--rename-command", name, ""))
        )
    )


def test_on_a_cluster_without_sharded_pubsub_idle_workers_poll(
    cluster_without_sharded_pubsub, schedulers, caplog
):
    """Redis < 7.0: SPUBLISH and SSUBSCRIBE unknown; idle workers notice by polling (and no
    classic PUBLISH, sent to every node, is made instead)."""
    nodes = cluster_without_sharded_pubsub
    client = RedisCluster.from_url(f"redis://127.0.0.1:{nodes.masters()[0].port}")
    with pytest.raises(redis.RedisError):
        client.spublish("{demo:requests}:news", "x")  # as Redis 6.2 answers
    errors = polled_without_news(scheduler_settings(nodes.url), schedulers, caplog)
    assert len(errors) == 3
    assert all("unknown command" in str(error) for error in errors)
    assert set(command_calls(nodes, "publish").values()) == {0}
    client.close()
