"""A crawl split into lanes (SCHEDULER_SHARDS), on one real redis-server: the same
contract as an unsplit crawl (every request once, duplicates dropped across workers,
batches sent again applied once), lane by lane. On a Redis Cluster: test_cluster.py."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from redis.crc import key_slot
from scrapy import Request

from helpers import open_scheduler
from lossy_proxy import LossyProxy
from scrapy_redis.exceptions import ConfigurationError
from scrapy_redis.queue import FifoQueue
from scrapy_redis.scheduling.lanes import LanedQueue
from scrapy_redis.store.keys import CLUSTER_SLOTS, lane_tags


class OwnEmptyQueue(FifoQueue):
    """A queue class of one's own that says itself whether it is empty."""

    asked = 0

    def is_empty(self):
        OwnEmptyQueue.asked += 1
        return super().is_empty()


class OwnPushQueue(FifoQueue):
    """A queue class of one's own that pushes one request at a time (no push script)."""

    def push(self, request):
        super().push(request)


FILTERS = ["RFPDupeFilter", "LeanDupeFilter", "BloomDupeFilter"]
QUEUES = ["FifoQueue", "LifoQueue", "PriorityQueue"]


def laned(url: str, queue: str = "FifoQueue", dupefilter: str = "RFPDupeFilter", **extra):
    return {
        "REDIS_URL": url,
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue}",
        "DUPEFILTER_CLASS": f"scrapy_redis.dupefilter.{dupefilter}",
        "SCHEDULER_SHARDS": 4,
        "DUPEFILTER_LEAN_CAPACITY": 10_000,
        "BLOOMFILTER_CAPACITY": 10_000,
        **extra,
    }


@pytest.mark.parametrize("lanes", [3, 5, 16])
def test_lane_tags_take_the_slot_ranges_in_turn(lanes):
    tags = lane_tags("myspider:requests", lanes)
    assert len(set(tags)) == lanes
    ranges = [key_slot(tag.encode()) * lanes // CLUSTER_SLOTS for tag in tags]
    assert ranges == list(range(lanes))
    assert tags == lane_tags("myspider:requests", lanes)  # every worker alike


@pytest.mark.parametrize("dupefilter", FILTERS)
@pytest.mark.parametrize("queue", QUEUES)
def test_two_workers_share_the_lanes(redis_url, server, schedulers, queue, dupefilter):
    settings = laned(redis_url, queue, dupefilter, SCHEDULER_PERSIST=True)
    first, second = schedulers(settings), schedulers(settings)
    assert isinstance(first.queue, LanedQueue) and len(first.queue.lanes) == 4
    urls = [f"http://example.com/{n}" for n in range(200)]
    for url in urls[:150]:
        first.enqueue_request(Request(url))
    assert first.send_enqueued()
    for url in urls[50:]:
        second.enqueue_request(Request(url))
    assert second.send_enqueued()
    assert second.stats.get_value("dupefilter/filtered") == 100
    assert len(first) == 200
    popped = [r.url for r in iter(first.next_request, None)]
    popped += [r.url for r in iter(second.next_request, None)]
    assert sorted(popped) == sorted(urls)
    lanes_used = {key.decode().split("{", 1)[1].split("}")[0] for key in server.keys("*{*/*}*")}
    assert lanes_used == set(lane_tags("demo:requests", 4))  # every lane got some
    assert server.get("demo:requests:lanes") == b"4"


def test_flush_deletes_every_lane_and_the_lane_count(redis_url, server, schedulers):
    scheduler = schedulers(laned(redis_url, "LifoQueue", "BloomDupeFilter", SCHEDULER_PERSIST=True))
    for n in range(50):
        scheduler.enqueue_request(Request(f"http://example.com/{n}"))
    assert scheduler.send_enqueued()
    scheduler.flush()
    left = [key for key in server.keys("*") if b":writes:" not in key]  # (records expire)
    assert left == [b"demo:requests:workers"]
    schedulers({**laned(redis_url), "SCHEDULER_SHARDS": 1})  # may start over unsplit


def test_the_last_worker_deletes_every_lane(redis_url, server, schedulers):
    first = schedulers(laned(redis_url, "PriorityQueue", "LeanDupeFilter"))
    second = schedulers(laned(redis_url, "PriorityQueue", "LeanDupeFilter"))
    for n in range(50):
        first.enqueue_request(Request(f"http://example.com/{n}"))
    first.send_enqueued()
    assert first.next_request() is not None
    first.close("finished")
    assert server.dbsize() > 0  # the other worker still uses them
    second.close("finished")
    assert server.keys("*") == []


def test_each_lane_keeps_its_order(redis_url, server, schedulers):
    scheduler = schedulers(laned(redis_url))
    urls = [f"http://example.com/{n}" for n in range(120)]
    for url in urls:
        scheduler.enqueue_request(Request(url))
    assert scheduler.send_enqueued()
    popped = [r.url for r in iter(scheduler.next_request, None)]
    assert sorted(popped) == sorted(urls)
    lanes = {url: _lane(scheduler, url) for url in urls}
    for lane in range(4):  # first in, first out within each lane
        mine = [url for url in popped if lanes[url] == lane]
        assert mine == [url for url in urls if lanes[url] == lane]
    runs = [url for n, url in enumerate(popped) if n == 0 or lanes[popped[n - 1]] != lanes[url]]
    assert len(runs) < 20  # a leased batch of one lane at a time, not a request each


def _lane(scheduler, url: str) -> int:
    from scrapy_redis.queue import Candidate
    from scrapy_redis.scheduling.lanes import lane_of

    fingerprint = scheduler.df.request_fingerprint(Request(url))
    return lane_of(Candidate(fingerprint, None), len(scheduler.queue.lanes))


def test_a_bloom_layer_filling_in_a_lane_sends_that_lanes_rest(redis_url, server, schedulers):
    settings = laned(redis_url, dupefilter="BloomDupeFilter", BLOOMFILTER_CAPACITY=80)
    scheduler = schedulers({**settings, "SCHEDULER_ENQUEUE_BATCH_SIZE": 1000})
    urls = [f"http://example.com/{n}" for n in range(400)]
    for url in urls:
        scheduler.enqueue_request(Request(url))
    assert scheduler.send_enqueued()
    for lane in scheduler.queue.filters:  # 20 each, grown while the batch was sent
        assert int(server.hget(lane.key, "layers")) >= 3
    popped = [r.url for r in iter(scheduler.next_request, None)]
    assert len(popped) == len(set(popped)) >= 398  # each once (a false positive or two)


@pytest.fixture
def proxy(redis_server):
    proxy = LossyProxy(redis_server.port)
    yield proxy
    proxy.close()


def test_a_batch_sent_again_after_a_failure_is_applied_once(proxy, server, schedulers, caplog):
    """The push of one lane fails (its reply lost twice: redis-py's retry too) while the
    other lanes answer (they are sent at once, in threads): the batch is sent again as it
    was; lanes that answered are not asked again, the failed one is answered by its
    record: every request once, none taken for a duplicate."""
    settings = laned(proxy.url, REDIS_PARAMS={"socket_timeout": 0.5})
    scheduler = schedulers({**settings, "SCHEDULER_ENQUEUE_BATCH_SIZE": 1000})
    scheduler.enqueue_request(Request("http://example.com/first"))
    assert scheduler.send_enqueued()  # scripts loaded
    urls = [f"http://example.com/{n}" for n in range(100)]
    for url in urls:
        scheduler.enqueue_request(Request(url))
    calls: list[int] = []
    failed = threading.Event()  # the others wait for it: the proxy loses that lane's reply
    for number, lane in enumerate(scheduler.queue.lanes):
        lane.push_new = _arming(lane.push_new, number, proxy, calls, failed)
    assert not scheduler.send_enqueued()  # an outage: kept in memory
    assert proxy.lost and sorted(calls) == [0, 1, 2, 3]
    for _ in range(50):  # until the outage's back-off lets it try again
        if scheduler.send_enqueued():
            break
        time.sleep(0.2)
    assert sorted(calls) == [0, 1, 2, 2, 3]  # sent again: the failed lane only
    assert scheduler.stats.get_value("dupefilter/filtered") in (None, 0)
    popped = [r.url for r in iter(scheduler.next_request, None)]
    assert sorted(popped) == sorted([*urls, "http://example.com/first"])


def _arming(push_new, number, proxy, calls, failed, failing=2):
    def push(*args, **kwargs):
        calls.append(number)
        if number != failing:
            failed.wait(10)
            return push_new(*args, **kwargs)
        if failed.is_set():
            return push_new(*args, **kwargs)
        proxy.lose_next_reply("drop", times=2)  # redis-py's retry lost too
        try:
            return push_new(*args, **kwargs)
        finally:
            failed.set()

    return push


def test_workers_with_another_lane_count_are_refused(redis_url, server, schedulers):
    first = schedulers(laned(redis_url, SCHEDULER_PERSIST=True))
    first.enqueue_request(Request("http://example.com/a"))
    assert first.send_enqueued()
    with pytest.raises(ConfigurationError, match=r"split into 4 lanes.*SCHEDULER_SHARDS = 4"):
        open_scheduler(laned(redis_url, SCHEDULER_SHARDS=2))
    with pytest.raises(ConfigurationError, match="split into 4 lanes"):
        open_scheduler({**laned(redis_url), "SCHEDULER_SHARDS": 1})


def test_a_crawl_not_split_is_not_split_by_a_worker_that_asks(redis_url, server, schedulers):
    unsplit = schedulers({**laned(redis_url), "SCHEDULER_SHARDS": 1, "SCHEDULER_PERSIST": True})
    unsplit.enqueue_request(Request("http://example.com/a"))
    assert unsplit.send_enqueued()
    assert not server.exists("demo:requests:lanes")  # no key more than before
    with pytest.raises(ConfigurationError, match="not split into lanes"):
        open_scheduler(laned(redis_url))
    assert not server.exists("demo:requests:lanes")


def test_a_crawl_not_split_whose_requests_are_all_leased_is_not_split(
    redis_url, server, schedulers
):
    """The queue key is gone (every request leased by workers that died): its leases and
    fingerprints still say the crawl is not split. The worker refused leaves no trace."""
    unsplit = open_scheduler({**laned(redis_url), "SCHEDULER_SHARDS": 1})
    unsplit.enqueue_request(Request("http://example.com/a"))
    assert unsplit.next_request() is not None  # leased; then SIGKILL: no close
    unsplit.stop_timers()
    assert not server.exists("demo:requests")
    with pytest.raises(ConfigurationError, match="not split into lanes"):
        open_scheduler(laned(redis_url))
    assert not server.exists("demo:requests:lanes")
    assert server.hlen("demo:requests:workers") == 1  # the dead worker's entry only


def test_what_cannot_be_split_is_refused_naming_the_setting(redis_url, server):
    with pytest.raises(ConfigurationError, match="SCHEDULER_SHARDS = 4, but the queue key"):
        open_scheduler(laned(redis_url, SCHEDULER_QUEUE_KEY="{%(spider)s}:requests"))
    with pytest.raises(ConfigurationError, match="SCHEDULER_SHARDS = 4, but the queue class"):
        open_scheduler(laned(redis_url, SCHEDULER_QUEUE_CLASS="test_lanes.OwnPushQueue"))
    with pytest.raises(ConfigurationError, match="SCHEDULER_SHARDS = 0 must be 1 to 1024"):
        open_scheduler(laned(redis_url, SCHEDULER_SHARDS=0))
    with pytest.raises(ConfigurationError, match="SCHEDULER_SHARDS = 20000 must be 1 to 1024"):
        open_scheduler(laned(redis_url, SCHEDULER_SHARDS=20000))


def test_one_redis_is_not_split_by_default(redis_url, server, schedulers):
    settings = laned(redis_url)
    del settings["SCHEDULER_SHARDS"]
    scheduler = schedulers(settings)
    assert not isinstance(scheduler.queue, LanedQueue)
    assert isinstance(server, redis.Redis)


def test_redis_unreachable_while_looking_into_the_lanes_is_an_outage(proxy, server, schedulers):
    params = {"socket_timeout": 0.5, "socket_connect_timeout": 0.5}
    scheduler = schedulers(laned(proxy.url, REDIS_PARAMS=params))
    for n in range(40):
        scheduler.enqueue_request(Request(f"http://example.com/{n}"))
    assert scheduler.send_enqueued()
    proxy.lose_next_reply("drop", times=1000)  # from now on every call fails
    handed = list(iter(scheduler.next_request, None))  # no exception: an outage
    assert handed == []
    assert scheduler.next_request() is None


def test_a_lane_that_fails_does_not_stop_the_others_upkeep():
    """One master of a cluster down: the other lanes' leases are still renewed, then the
    failure is raised (an outage for the caller)."""
    from scrapy_redis.scheduling.lanes import LanedFeed

    class Lane:
        def __init__(self, fails: bool) -> None:
            self.fails, self.maintained = fails, False

        def maintain(self) -> None:
            if self.fails:
                raise redis.ConnectionError("its master is down")
            self.maintained = True

    lanes = [Lane(False), Lane(True), Lane(False)]
    feed = LanedFeed(None, lanes)
    with pytest.raises(redis.ConnectionError):
        feed.maintain()
    assert [lane.maintained for lane in lanes] == [True, False, True]


def test_a_batch_holds_the_batch_size_per_lane(redis_url, server, schedulers):
    """SCHEDULER_ENQUEUE_BATCH_SIZE is each lane's share: 4 lanes of 10 send one call per
    lane for 40 requests, not one per lane every 10 requests."""
    from helpers import Calls

    scheduler = schedulers(laned(redis_url, SCHEDULER_ENQUEUE_BATCH_SIZE=10))
    scheduler.enqueue_request(Request("http://example.com/first"))
    assert scheduler.send_enqueued()  # scripts loaded
    calls = Calls(server, "evalsha")
    for n in range(39):
        scheduler.enqueue_request(Request(f"http://example.com/{n}"))
    assert calls()["evalsha"] == 0  # still waiting (SCHEDULER_ENQUEUE_DELAY or 40)
    scheduler.enqueue_request(Request("http://example.com/39"))
    assert calls()["evalsha"] == 4  # one call per lane


def test_a_lane_pushed_to_or_found_holding_is_tried_first(redis_url, server, schedulers):
    """Lanes found empty are tried after the others, unless this worker pushed to them
    or its idle check (one pipelined EXISTS of every lane) found requests there: then
    the pop goes there first, not to each lane in turn, a round trip each."""
    from helpers import Calls

    settings = laned(redis_url, SCHEDULER_PERSIST=True, SCHEDULER_ENQUEUE_DELAY=0)
    worker, other = schedulers(settings), schedulers(settings)
    last = [f"http://example.com/{n}" for n in range(200)]
    last = [url for url in last if _lane(worker, url) == 0]  # lane 0: last in turn
    calls = Calls(server, "evalsha")
    assert worker.next_request() is None
    assert calls()["evalsha"] == 4  # every lane popped, found empty

    worker.enqueue_request(Request(last[0]))  # this worker pushes to lane 0
    assert calls()["evalsha"] == 1
    assert worker.next_request().url == last[0]
    assert calls()["evalsha"] == 1  # lane 0 first

    assert worker.next_request() is None  # every lane found empty again
    other.enqueue_request(Request(last[1]))  # another worker pushes to lane 0
    assert worker.has_pending_requests()  # its idle check finds it there
    calls()
    assert worker.next_request().url == last[1]
    assert calls()["evalsha"] == 1  # lane 0 first


def test_lanes_holding_asks_every_lane(redis_url, server, schedulers):
    scheduler = schedulers(laned(redis_url, SCHEDULER_ENQUEUE_DELAY=0))
    queue = scheduler.queue
    assert queue.lanes_holding() == [False] * 4 and queue.is_empty()
    scheduler.enqueue_request(Request("http://example.com/one"))
    holding = queue.lanes_holding()
    assert holding == [bool(server.exists(lane.key)) for lane in queue.lanes]
    assert sum(holding) == 1 and not queue.is_empty()


def test_lanes_of_a_class_with_its_own_is_empty_are_asked_it(redis_url, server, schedulers):
    settings = laned(redis_url, SCHEDULER_ENQUEUE_DELAY=0)
    scheduler = schedulers({**settings, "SCHEDULER_QUEUE_CLASS": "test_lanes.OwnEmptyQueue"})
    scheduler.enqueue_request(Request("http://example.com/one"))
    asked = OwnEmptyQueue.asked
    holding = scheduler.queue.lanes_holding()
    assert sum(holding) == 1 and OwnEmptyQueue.asked > asked
    assert holding == [bool(server.exists(lane.key)) for lane in scheduler.queue.lanes]
