"""scrapy-redis on a real Redis Cluster (6 nodes, started by the ``redis_cluster`` fixture):
the connection URL, every component with the default key templates, failover."""

from __future__ import annotations

import json
import time

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot
from scrapy import Request
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from helpers import DemoSpider, command_calls
from redis_server import free_port
from scrapy_redis.connection import (
    describe_server,
    get_redis_from_crawler,
    get_redis_from_settings,
)
from scrapy_redis.exceptions import ConfigurationError, RedisUnavailableError
from scrapy_redis.scheduling.lanes import LanedQueue
from scrapy_redis.store.keys import hash_tag, lane_tags

FILTERS = ["RFPDupeFilter", "LeanDupeFilter", "BloomDupeFilter"]
QUEUES = ["FifoQueue", "LifoQueue", "PriorityQueue"]


def masters_holding(cluster: RedisCluster, keys: set[str]) -> set[str]:
    """The masters (host:port) serving ``keys``."""
    return {cluster.get_node_from_key(key).name for key in keys}


def all_keys(cluster: RedisCluster) -> set[str]:
    """Every key of every master."""
    found: set[str] = set()
    for node in cluster.get_primaries():
        found |= {k.decode() for k in cluster.keys(target_nodes=node)}
    return found


def scheduler_settings(url: str, queue: str = "FifoQueue", dupefilter: str = "RFPDupeFilter"):
    return {
        "REDIS_URL": url,
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue}",
        "DUPEFILTER_CLASS": f"scrapy_redis.dupefilter.{dupefilter}",
        "DUPEFILTER_LEAN_CAPACITY": 10_000,
        "BLOOMFILTER_CAPACITY": 10_000,
    }


# --- connecting ------------------------------------------------------------------------


def test_a_cluster_url_gives_a_cluster_client(redis_cluster, cluster):
    client = get_redis_from_settings(Settings({"REDIS_URL": redis_cluster.url}))
    assert isinstance(client, RedisCluster)
    assert describe_server(client).startswith("redis+cluster://127.0.0.1:")
    one_node = f"redis+cluster://127.0.0.1:{redis_cluster.nodes[3].port}"  # any node will do
    other = get_redis_from_settings(Settings({"REDIS_URL": one_node}))
    for n in range(20):  # keys of every master
        other.set(f"k{n}", n)
    assert [int(client.get(f"k{n}")) for n in range(20)] == list(range(20))


def test_a_plain_url_to_a_cluster_node_is_refused_naming_the_cluster_url(redis_cluster):
    port = redis_cluster.nodes[0].port
    crawler = get_crawler(DemoSpider, {"REDIS_URL": f"redis://127.0.0.1:{port}"})
    with pytest.raises(
        ConfigurationError, match=rf"REDIS_URL = 'redis\+cluster://127.0.0.1:{port}'"
    ):
        get_redis_from_crawler(crawler)


def test_a_database_other_than_0_is_refused(redis_cluster):
    with pytest.raises(ConfigurationError, match="database 0 only"):
        get_redis_from_settings(Settings({"REDIS_URL": f"{redis_cluster.url}/2"}))


def test_an_unreachable_cluster_is_reported_naming_the_url():
    url = f"redis+cluster://:secret@127.0.0.1:{free_port()}"
    with pytest.raises(RedisUnavailableError, match=r"redis\+cluster://:\*\*\*@127.0.0.1"):
        get_redis_from_settings(Settings({"REDIS_URL": url}))


def test_redis_cls_in_redis_params_still_works(redis_cluster, cluster):
    settings = {
        "REDIS_URL": f"redis://127.0.0.1:{redis_cluster.nodes[0].port}",
        "REDIS_PARAMS": {"redis_cls": "redis.cluster.RedisCluster"},
    }
    client = get_redis_from_crawler(get_crawler(DemoSpider, settings))
    assert isinstance(client, RedisCluster)


# --- the scheduler with the default key templates -----------------------------------------


@pytest.mark.parametrize("dupefilter", FILTERS)
@pytest.mark.parametrize("queue", QUEUES)
def test_the_scheduler_works_with_the_default_templates(
    redis_cluster, cluster, schedulers, queue, dupefilter
):
    settings = scheduler_settings(redis_cluster.url, queue, dupefilter)
    first = schedulers({**settings, "SCHEDULER_PERSIST": True})
    second = schedulers({**settings, "SCHEDULER_PERSIST": True})
    urls = [f"http://example.com/{n}" for n in range(60)]
    for url in urls[:40]:
        first.enqueue_request(Request(url))
    assert first.send_enqueued()
    for url in urls[20:]:  # 20 duplicates
        second.enqueue_request(Request(url))
    assert second.send_enqueued()
    assert second.stats.get_value("dupefilter/filtered") == 20
    popped = [r.url for r in iter(first.next_request, None)]
    popped += [r.url for r in iter(second.next_request, None)]
    assert sorted(popped) == sorted(urls)
    # Split into a lane per master (SCHEDULER_SHARDS not set), one on each of the 3.
    lanes = lane_tags("demo:requests", 3)
    assert [lane.key for lane in first.queue.lanes] == [f"{{{tag}}}" for tag in lanes]
    keys = all_keys(cluster) - {"{demo:requests}:workers", "{demo:requests}:lanes"}
    assert {hash_tag(key) for key in keys} <= set(lanes), keys
    assert len(masters_holding(cluster, keys)) == 3


def test_scripts_lost_by_the_nodes_are_sent_again(redis_cluster, cluster, schedulers):
    """A promoted replica's script cache is empty: the scheduler's scripts are sent whole
    (EVAL) where EVALSHA answers NOSCRIPT, lane by lane."""
    scheduler = schedulers(scheduler_settings(redis_cluster.url))
    urls = [f"http://example.com/{n}" for n in range(30)]
    for url in urls[:15]:
        scheduler.enqueue_request(Request(url))
    assert scheduler.send_enqueued()
    masters = [redis.Redis(port=node.port) for node in redis_cluster.masters()]
    for client in masters:
        client.script_flush()
        client.config_resetstat()
    for url in urls[15:]:
        scheduler.enqueue_request(Request(url))
    assert scheduler.send_enqueued()
    assert sorted(r.url for r in iter(scheduler.next_request, None)) == sorted(urls)
    assert sum(command_calls(client, "eval") for client in masters) >= 3  # a push per lane
    for client in masters:
        client.close()


def test_one_lane_keeps_the_crawl_in_the_queues_slot(redis_cluster, cluster, schedulers):
    settings = {**scheduler_settings(redis_cluster.url, "PriorityQueue"), "SCHEDULER_SHARDS": 1}
    scheduler = schedulers({**settings, "SCHEDULER_PERSIST": True})
    for n in range(20):
        scheduler.enqueue_request(Request(f"http://example.com/{n}", priority=n % 3))
    assert scheduler.send_enqueued()
    assert scheduler.next_request().priority == 2
    keys = all_keys(cluster)
    assert {"{demo:requests}:leases", "{demo:requests}:workers"} <= keys
    assert {key_slot(k.encode()) for k in keys} == {key_slot(b"demo:requests")}, keys
    assert scheduler.df.key == "demo:dupefilter:{demo:requests}"


def test_a_worker_that_leaves_last_deletes_the_crawl(redis_cluster, cluster, schedulers):
    scheduler = schedulers(scheduler_settings(redis_cluster.url, "PriorityQueue", "LeanDupeFilter"))
    scheduler.enqueue_request(Request("http://example.com/a"))
    assert scheduler.next_request().url == "http://example.com/a"
    scheduler.enqueue_request(Request("http://example.com/b"))
    scheduler.send_enqueued()
    scheduler.close("finished")
    assert all_keys(cluster) == set()


def test_hash_tagged_templates_are_kept(redis_cluster, cluster, schedulers):
    settings = {
        **scheduler_settings(redis_cluster.url),
        "SCHEDULER_QUEUE_KEY": "{%(spider)s}:requests",
        "SCHEDULER_DUPEFILTER_KEY": "{%(spider)s}:dupefilter",
        "SCHEDULER_PERSIST": True,
    }
    scheduler = schedulers(settings)
    scheduler.enqueue_request(Request("http://example.com/a"))
    assert scheduler.send_enqueued()
    assert scheduler.df.key == "{demo}:dupefilter"
    assert {"{demo}:requests", "{demo}:dupefilter"} <= all_keys(cluster)


def test_a_tagged_queue_is_not_split_unless_asked(redis_cluster, cluster, schedulers):
    from helpers import open_scheduler

    settings = {
        **scheduler_settings(redis_cluster.url),
        "SCHEDULER_QUEUE_KEY": "{%(spider)s}:requests",
        "SCHEDULER_DUPEFILTER_KEY": "{%(spider)s}:dupefilter",
    }
    assert schedulers(settings).queue.key == "{demo}:requests"  # one queue: its own tag
    with pytest.raises(ConfigurationError, match="SCHEDULER_SHARDS = 4, but the queue key"):
        open_scheduler({**settings, "SCHEDULER_SHARDS": 4})


def test_a_filter_tagged_apart_from_the_queue_is_refused(redis_cluster, cluster):
    from helpers import open_scheduler

    settings = {
        **scheduler_settings(redis_cluster.url),
        "SCHEDULER_DUPEFILTER_KEY": "{other}:dupefilter",
    }
    with pytest.raises(ConfigurationError, match="SCHEDULER_DUPEFILTER_KEY"):
        open_scheduler(settings)


# --- the other components ----------------------------------------------------------------


@pytest.mark.parametrize("dupefilter", FILTERS)
def test_each_filter_standalone(redis_cluster, cluster, dupefilter):
    from scrapy_redis import dupefilter as module

    settings = {"REDIS_URL": redis_cluster.url, "BLOOMFILTER_CAPACITY": 1000}
    df = getattr(module, dupefilter).from_crawler(get_crawler(DemoSpider, settings))
    urls = [f"http://example.com/{n}" for n in range(50)]
    assert [df.request_seen(Request(u)) for u in urls] == [False] * 50
    assert all(df.request_seen(Request(u)) for u in urls)
    df.close("finished")
    assert all_keys(cluster) == set()


def test_pipeline_and_stats(redis_cluster, cluster):
    from scrapy_redis.pipelines import RedisPipeline

    settings = {
        "REDIS_URL": redis_cluster.url,
        "STATS_CLASS": "scrapy_redis.stats.RedisStatsCollector",
    }
    crawler = get_crawler(DemoSpider, settings)
    spider = DemoSpider()
    pipeline = RedisPipeline.from_crawler(crawler)
    for n in range(5):
        pipeline.process_item({"n": n}, spider)
    pipeline.close_spider(spider)
    assert [json.loads(raw)["n"] for raw in cluster.lrange("demo:items", 0, -1)] == list(range(5))
    stats = crawler.stats
    stats.set_stats({"a": 1, "b": "two"})
    assert stats.get_stats() == {"a": 1, "b": "two"}
    # Two workers: the fleet's totals, and each one's hash in the fleet hash's slot.
    first, second = (
        get_crawler(DemoSpider, {**settings, "STATS_FLUSH_INTERVAL": 0}).stats for _ in range(2)
    )
    first.inc_value("pages", 3)
    second.inc_value("pages", 2)
    assert first.get_value("pages") == 5
    for own, pages in ((first, b"3"), (second, b"2")):
        assert cluster.hget(f"{{demo:stats}}:worker:{own.worker_id}", "pages") == pages
    workers = {member.decode() for member in cluster.zrange("{demo:stats}:workers", 0, -1)}
    assert workers == {first.worker_id, second.worker_id}
    first.close_spider(reason="finished")  # no scheduler, no persist: deletes them all
    assert not {key for key in all_keys(cluster) if ":writes:" not in key} - {"demo:items"}
    second.close_spider(reason="finished")  # (and its record of writes)
    assert all_keys(cluster) == {"demo:items"}


class RoutingPipeline:
    """A RedisPipeline of one's own sending items to a list per kind (lists in several
    hash slots)."""

    @staticmethod
    def build(crawler):
        from scrapy_redis.pipelines import RedisPipeline

        class Routing(RedisPipeline):
            def item_key(self, item, spider):
                return f"demo:items:{item['kind']}"

        return Routing.from_crawler(crawler)


def test_items_routed_to_lists_in_several_slots(redis_cluster, cluster):
    crawler = get_crawler(DemoSpider, {"REDIS_URL": redis_cluster.url})
    pipeline, spider = RoutingPipeline.build(crawler), DemoSpider()
    kinds = ["book", "film", "song", "game"]
    assert len({key_slot(f"demo:items:{kind}".encode()) for kind in kinds}) > 1
    pipeline.guard.failed(redis.ConnectionError("a blip"))  # items kept, pushed together
    for n in range(20):
        pipeline.process_item({"kind": kinds[n % 4], "n": n}, spider)
    pipeline.close_spider(spider)
    for number, kind in enumerate(kinds):
        stored = [json.loads(raw)["n"] for raw in cluster.lrange(f"demo:items:{kind}", 0, -1)]
        assert stored == list(range(number, 20, 4))


@pytest.mark.parametrize("mode", ["list", "set", "zset"])
def test_start_urls_in_each_mode(redis_cluster, cluster, mode):
    from test_spiders import make, urls

    settings = {
        "REDIS_URL": redis_cluster.url,
        "REDIS_START_URLS_AS_SET": mode == "set",
        "REDIS_START_URLS_AS_ZSET": mode == "zset",
    }
    spider = make(settings)
    pages = [f"https://example.com/{n}" for n in range(3)]
    if mode == "list":
        cluster.rpush("myspider:start_urls", *pages)
    elif mode == "set":
        cluster.sadd("myspider:start_urls", *pages)
    else:
        cluster.zadd("myspider:start_urls", {page: n for n, page in enumerate(pages)})
    assert sorted(urls(spider.next_requests())) == pages


def test_start_keys_sharing_a_tag_work_and_others_are_refused(redis_cluster, cluster):
    from test_spiders import make, urls

    settings = {"REDIS_URL": redis_cluster.url}
    spider = make(settings, redis_key=["{%(name)s}:high", "{%(name)s}:low"])
    cluster.rpush("{myspider}:low", "https://example.com/l")
    assert urls(spider.next_requests()) == ["https://example.com/l"]
    with pytest.raises(ConfigurationError, match="share a hash slot"):
        make(settings, redis_key=["high", "low"]).next_requests()


# --- failover ------------------------------------------------------------------------------


def test_the_scheduler_rides_out_a_failover(redis_cluster, cluster, schedulers, caplog):
    """kill -9 the master of the crawl's slot: calls fail (an outage, not a crash) until
    its replica is promoted; then the scheduler goes on with what the replica has."""
    scheduler = schedulers(scheduler_settings(redis_cluster.url))
    urls = [f"http://example.com/{n}" for n in range(100)]
    for url in urls[:50]:
        scheduler.enqueue_request(Request(url))
    assert scheduler.send_enqueued()
    popped = [scheduler.next_request().url for _ in range(10)]
    master = redis_cluster.master_of("demo:requests")
    wait_replicated(master)  # the replica has it all
    redis_cluster.kill(master)
    try:
        for url in urls[50:]:  # accepted during the outage, kept in memory
            scheduler.enqueue_request(Request(url))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(popped) < len(urls):
            scheduler.send_enqueued()
            request = scheduler.next_request()
            if request is None:
                time.sleep(0.2)
            else:
                popped.append(request.url)
        assert sorted(popped) == sorted(urls)  # every request once
        assert "Redis is unreachable" in caplog.text
    finally:
        redis_cluster.revive(master)


def test_a_cluster_that_is_down_is_an_outage_not_a_crash(
    redis_cluster, cluster, schedulers, caplog
):
    """Another shard lost whole (master and replica): every node answers CLUSTERDOWN (full
    coverage required) until it is back; the scheduler keeps its work in memory meanwhile."""
    # one lane: the crawl's keys on a master that stays up, answering CLUSTERDOWN
    scheduler = schedulers({**scheduler_settings(redis_cluster.url), "SCHEDULER_SHARDS": 1})
    ours = redis_cluster.master_of("demo:requests")
    other = next(node for node in redis_cluster.masters() if node is not ours)
    lost = redis_cluster.shard_of(other)
    for node in lost:
        redis_cluster.kill(node)
    try:
        deadline = time.monotonic() + 10  # the nodes see the shard fail after NODE_TIMEOUT_MS
        while "cluster is down" not in caplog.text and time.monotonic() < deadline:
            scheduler.enqueue_request(Request(f"http://example.com/{time.monotonic()}"))
            scheduler.send_enqueued()
            scheduler.next_request()  # never raises: an outage
            time.sleep(0.3)
        assert "Redis is unreachable (The cluster is down)" in caplog.text
        assert scheduler.has_unsent_requests()  # kept in memory
    finally:
        for node in lost:
            redis_cluster.revive(node)
    deadline = time.monotonic() + 30
    while scheduler.has_unsent_requests() and time.monotonic() < deadline:
        scheduler.send_enqueued()
        time.sleep(0.3)
    assert not scheduler.has_unsent_requests()
    assert "Redis is reachable again" in caplog.text


# --- real crawls ---------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_two_workers_crawl_every_page_once_on_the_cluster(redis_cluster, cluster, tmp_path):
    from test_e2e import (
        DOMAIN,
        IDLE,
        PAGES,
        DemoSite,
        assert_each_worker_crawled,
        assert_hits,
        assert_items,
        crawl,
        expected_hits,
        expected_pages,
    )

    with DemoSite(pages=PAGES) as site:
        cluster.lpush("myspider:start_urls", json.dumps({"url": site.url}))
        settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": IDLE, "SCHEDULER_PERSIST": False}
        workers = crawl("myspider_redis", redis_cluster.url, tmp_path, settings=settings,
                        arguments=DOMAIN)  # fmt: skip
        assert_hits(site.snapshot(), expected_hits(PAGES))
        assert_items(cluster, "myspider_redis", site, expected_pages(PAGES))
    assert_each_worker_crawled(workers)
    assert all_keys(cluster) == {"myspider_redis:items"}  # the last worker cleared the rest


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_crawl_survives_the_failover_of_its_master(redis_cluster, cluster, tmp_path):
    """kill -9 the master of the crawl's slot mid-crawl: its replica is promoted, the
    workers ride out the outage, and every page is fetched and every item stored (some
    perhaps twice: writes the replica had not received are done again)."""
    from test_e2e import (
        DOMAIN,
        IDLE,
        PAGES,
        DemoSite,
        expected_hits,
        expected_pages,
        start_worker,
        wait_all,
        wait_for_requests,
    )

    with DemoSite(pages=PAGES) as site:
        cluster.lpush("myspider:start_urls", json.dumps({"url": site.url}))
        settings = {
            "MAX_IDLE_TIME_BEFORE_CLOSE": IDLE,
            "SCHEDULER_PERSIST": True,
            "SCHEDULER_WORKER_TIMEOUT": 6,  # leases lost with the master come back soon
        }
        workers = [
            start_worker(
                "myspider_redis", redis_cluster.url, tmp_path / f"w{n}.log", settings, DOMAIN
            )
            for n in (1, 2)
        ]
        wait_for_requests(site, PAGES // 3, workers[0])
        master = redis_cluster.master_of("myspider_redis:requests")
        redis_cluster.kill(master)
        try:
            wait_all(workers)
        finally:
            redis_cluster.revive(master)
        hits = site.snapshot()
    expected = expected_hits(PAGES)
    missed = sorted(set(expected) - set(hits))
    assert not missed, f"{len(missed)} pages never fetched, e.g. {missed[:10]}"
    items = [json.loads(raw)["url"] for raw in cluster.lrange("myspider_redis:items", 0, -1)]
    base = site.url.rstrip("/")
    assert {base + path for path in expected_pages(PAGES)} <= set(items)
    twice = sum(count - 1 for path, count in hits.items() if path.startswith("/p/"))
    print(f"failover: {twice} page fetches repeated, {len(items) - len(set(items))} items twice")
    assert any("Redis is unreachable" in worker.log for worker in workers)


@pytest.mark.parametrize("how", ["url", "redis_cls"])
def test_a_failover_changes_the_clients_server_identity(redis_cluster, cluster, how):
    """What a worker remembers of the data (its seen cache) is dropped when a replica
    that may lack the newest writes becomes a master."""
    from scrapy_redis.connection import server_identity

    settings = {"REDIS_URL": redis_cluster.url}
    if how == "redis_cls":
        settings = {
            "REDIS_URL": f"redis://127.0.0.1:{redis_cluster.masters()[0].port}",
            "REDIS_PARAMS": {"redis_cls": "redis.cluster.RedisCluster"},
        }
    client = get_redis_from_settings(Settings(settings))
    client.set("demo:x", 1)
    identity = server_identity(client)
    before = identity.changes
    client.get("demo:x")
    assert identity.changes == before  # the same connections, the same nodes
    master = redis_cluster.master_of("demo:x")
    # the write on the replica before the master dies (else the promoted replica may
    # lack it: asynchronous replication, what this test is not about)
    wait_replicated(master)
    redis_cluster.kill(master)
    try:
        redis_cluster.wait_ok(60)
        deadline = time.monotonic() + 60
        while True:
            try:
                value = client.get("demo:x")
                break
            except redis.RedisError as exc:  # the client still finding the new master
                assert time.monotonic() < deadline, f"no answer after the failover: {exc!r}"
                time.sleep(0.1)
        assert value == b"1"
        assert identity.changes > before
    finally:
        redis_cluster.revive(master)


def wait_replicated(master) -> None:
    """Wait until a replica of ``master`` acknowledged every write made to it so far
    (``WAIT``; one call of 2 s was not always enough on a loaded machine)."""
    with redis.Redis(port=master.port) as direct:
        deadline = time.monotonic() + 60  # a bound for a stalled machine, not a wait
        while direct.wait(1, 1000) < 1:
            assert time.monotonic() < deadline, "the replica never acknowledged the writes"


def test_a_worker_joining_while_the_lanes_are_deleted_waits(redis_cluster, cluster, schedulers):
    """The lanes are in many slots: the last worker claims their deletion in the registry
    ('~flushing'), deletes them, then drops the claim. A worker joining meanwhile waits,
    or what it pushed could be deleted."""
    from redis.cluster import RedisCluster as Cluster

    registry = "{demo:requests}:workers"
    seconds, micros = cluster.time(target_nodes=cluster.get_node_from_key(registry))
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    cluster.hset(registry, "~flushing", now_ms + 1500)  # as a leaving worker would
    assert isinstance(cluster, Cluster)
    started = time.monotonic()
    scheduler = schedulers(scheduler_settings(redis_cluster.url))
    assert time.monotonic() - started >= 1.0  # waited for the claim to end (or expire)
    assert not cluster.hexists(registry, "~flushing")
    scheduler.enqueue_request(Request("http://example.com/a"))
    assert scheduler.send_enqueued()
    assert scheduler.next_request().url == "http://example.com/a"


def test_the_last_worker_clears_the_lanes_and_filters_under_its_claim(redis_cluster, cluster):
    """Keys in several slots: the claim ('~flushing') is held while the keys are deleted and
    the filters' other keys cleared (after_flush), and dropped only when all went well."""
    from scrapy_redis.scheduling.workers import WorkerRegistry

    registry = "{demo:requests}:workers"
    lanes = [f"{{demo:requests/{n}}}" for n in range(8)]
    for key in lanes:
        cluster.rpush(key, "x")
    held = []
    last = WorkerRegistry(cluster, registry, "w1", 10)
    last.join()
    census = last.leave(
        lanes, after_flush=lambda: held.append(cluster.hexists(registry, "~flushing"))
    )
    assert census.flushed and held == [True]
    assert not cluster.exists(*lanes) and not cluster.hexists(registry, "~flushing")

    for key in lanes:
        cluster.rpush(key, "x")
    failing = WorkerRegistry(cluster, registry, "w2", 10)
    failing.join()

    def fail() -> None:
        raise redis.ConnectionError("lost half-way")

    with pytest.raises(redis.ConnectionError):
        failing.leave(lanes, after_flush=fail)
    assert cluster.hexists(registry, "~flushing")  # kept: a joining worker waits for it


def test_the_lane_count_not_set_is_the_crawls_or_the_masters(redis_cluster, cluster, schedulers):
    """Not set: the first worker splits the crawl into a lane per master and records it;
    a later worker takes the recorded count (here as if made with 8), whatever the cluster
    has now; a crawl kept without lanes goes on without."""
    first = schedulers({**scheduler_settings(redis_cluster.url), "SCHEDULER_PERSIST": True})
    assert len(first.queue.lanes) == 3 and cluster.get("{demo:requests}:lanes") == b"3"
    cluster.set("{demo:requests}:lanes", 8)
    assert len(schedulers(scheduler_settings(redis_cluster.url)).queue.lanes) == 8
    cluster.delete("{demo:requests}:lanes")
    cluster.rpush("demo:requests", "x")  # a crawl not split
    later = schedulers(scheduler_settings(redis_cluster.url))
    assert not isinstance(later.queue, LanedQueue)


@pytest.mark.parametrize("dupefilter", ["RFPDupeFilter", "LeanDupeFilter", "BloomDupeFilter"])
def test_fingerprints_expire_in_every_lane(redis_cluster, cluster, schedulers, dupefilter):
    settings = {
        **scheduler_settings(redis_cluster.url, "PriorityQueue", dupefilter),
        "SCHEDULER_PERSIST": True,
        "DUPEFILTER_LIFETIME": 1,
    }
    first, second = schedulers(settings), schedulers(settings)
    urls = [f"http://example.com/{n}" for n in range(30)]

    def crawl_again(scheduler) -> list[str]:
        for url in urls:
            scheduler.enqueue_request(Request(url))
        assert scheduler.send_enqueued()
        return [r.url for r in iter(scheduler.next_request, None)]

    assert sorted(crawl_again(first)) == sorted(urls)
    assert crawl_again(second) == []  # alive: duplicates in every lane
    deadline = time.monotonic() + 30
    again: list[str] = []
    while len(again) < len(urls):  # each comes back once its lifetime is over
        assert time.monotonic() < deadline, f"only {len(again)} expired"
        again += crawl_again(second)
        time.sleep(0.05)
    assert sorted(again) == sorted(urls)


def test_bloom_generations_stay_in_their_lanes_slot_and_expire(redis_cluster, cluster, schedulers):
    settings = {
        **scheduler_settings(redis_cluster.url, "PriorityQueue", "BloomDupeFilter"),
        "SCHEDULER_PERSIST": True,
        "DUPEFILTER_LIFETIME": 60,
    }
    scheduler = schedulers(settings)
    for n in range(30):
        scheduler.enqueue_request(Request(f"http://example.com/{n}"))
    assert scheduler.send_enqueued()
    generations = [k for k in cluster.scan_iter(match="*:bloom:t*", count=1000)]
    filters = {k for k in cluster.scan_iter(match="demo:dupefilter:{*}", count=1000)}
    assert len(filters) == len(scheduler.queue.lanes) > 1
    for key in generations:  # each in its lane's filter's slot, expiring
        tag = hash_tag(key.decode())
        assert any(hash_tag(f.decode()) == tag for f in filters), key
        assert 0 < cluster.pttl(key) <= 90_000
    assert len({hash_tag(k.decode()) for k in generations}) == len(filters)


def test_a_request_due_later_on_the_cluster(redis_cluster, cluster, schedulers):
    settings = {**scheduler_settings(redis_cluster.url, "PriorityQueue"), "SCHEDULER_PERSIST": True}
    first, second = schedulers(settings), schedulers(settings)
    first.enqueue_request(Request("http://example.com/later", meta={"due_in": 0.5}))
    assert second.shared_work_pending() is True
    deadline = time.monotonic() + 30
    while (request := second.next_request()) is None:
        assert time.monotonic() < deadline, "never due"
        time.sleep(0.05)
    assert request.url == "http://example.com/later"
