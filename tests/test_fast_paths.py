"""The batched paths of the scheduler: buffered enqueues, prefetched leased pops.

Round trips are counted with the server's own ``INFO commandstats``: every
batched operation is one ``EVALSHA`` (the commands a script runs are counted
under their own names, never as client calls).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from scrapy import Request
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler
from twisted.internet.task import Clock

from helpers import (
    Calls,
    DemoSpider,
    expire_leases,
    guard_clock,
    leased_entries,
    record_dropped,
    results_of_processes,
    stand_in_engine,
)
from scrapy_redis import queue as queue_module
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.queue import Base, Candidate, PriorityQueue
from scrapy_redis.queues.leases import LeaseBook
from scrapy_redis.scheduler import Scheduler
from scrapy_redis.scheduling.enqueue import FORGETS_EVERY, SeenCache
from scrapy_redis.scheduling.wakeup import NewsListener, QueueWatcher
from scrapy_redis.store.outage import OutageGuard


@pytest.mark.parametrize("queue_cls", ["FifoQueue", "LifoQueue", "PriorityQueue"])
def test_enqueued_requests_are_sent_after_the_delay_in_one_call(
    settings_dict, server, schedulers, queue_cls
):
    clock = Clock()
    scheduler = schedulers(
        {**settings_dict, "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue_cls}"},
        reactor=clock,
    )
    dropped = record_dropped(scheduler)
    calls = Calls(server, "evalsha", "sadd", "lpush", "rpush")
    duplicates = [Request("http://example.com/3"), Request("http://example.com/5")]
    for i in range(10):
        scheduler.enqueue_request(Request(f"http://example.com/{i}", priority=i % 3))
    for request in duplicates:
        assert scheduler.enqueue_request(request) is True
    assert server.exists("demo:requests", "demo:requests:prio:0", "demo:dupefilter") == 0
    # The heartbeat's call (every SCHEDULER_WORKER_TIMEOUT / 3) and the send's.
    assert sorted(call.getTime() for call in clock.getDelayedCalls())[0] == pytest.approx(0.1)
    assert calls() == {"evalsha": 0, "sadd": 0, "lpush": 0, "rpush": 0}
    clock.advance(0.1)  # SCHEDULER_ENQUEUE_DELAY: the reactor's turn
    assert calls()["evalsha"] == 1  # 12 fingerprints and 10 pushes: one script call
    assert len(scheduler.queue) == 10 and server.scard("demo:dupefilter") == 10
    assert dropped == duplicates
    assert scheduler.stats.get_value("scheduler/enqueued/redis") == 10
    assert scheduler.stats.get_value("dupefilter/filtered") == 2


def test_a_full_batch_is_sent_at_once(settings_dict, server, schedulers):
    scheduler = schedulers({**settings_dict, "SCHEDULER_ENQUEUE_BATCH_SIZE": 4})
    for i in range(3):
        scheduler.enqueue_request(Request(f"http://example.com/{i}"))
    assert not server.exists("demo:dupefilter")
    scheduler.enqueue_request(Request("http://example.com/3"))
    assert server.scard("demo:dupefilter") == 4
    assert len(scheduler.queue) == 4


def test_requests_are_sent_before_popping(settings_dict, server, schedulers):
    scheduler = schedulers(settings_dict)
    scheduler.enqueue_request(Request("http://example.com/a", priority=1))
    scheduler.enqueue_request(Request("http://example.com/b", priority=2))
    assert [scheduler.next_request().url for _ in range(2)] == [
        "http://example.com/b",
        "http://example.com/a",
    ]


def test_duplicates_within_a_batch_and_dont_filter(settings_dict, server, schedulers):
    scheduler = schedulers(settings_dict)
    dropped = record_dropped(scheduler)
    urls = ["http://example.com/a"] * 3
    for url in urls:
        scheduler.enqueue_request(Request(url))
    scheduler.enqueue_request(Request(urls[0], dont_filter=True))
    assert scheduler.send_enqueued()
    assert len(dropped) == 2
    assert [scheduler.next_request().url for _ in range(2)] == urls[:2]
    assert scheduler.next_request() is None


@pytest.mark.parametrize("queue_cls", ["FifoQueue", "LifoQueue", "PriorityQueue"])
def test_one_batch_of_every_kind(settings_dict, server, schedulers, queue_cls):
    """New, repeated, dont_filter, unserializable and already recorded requests of
    several priorities in one script call: each gets its answer, in order."""
    scheduler = schedulers(
        {
            **settings_dict,
            "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue_cls}",
            "SCHEDULER_SEEN_CACHE_SIZE": 0,  # "old" goes to Redis
        }
    )
    dropped = record_dropped(scheduler)
    scheduler.enqueue_request(Request("http://example.com/old"))
    scheduler.send_enqueued()
    scheduler.next_request()
    calls = Calls(server, "evalsha")
    batch = [
        Request("http://example.com/a", priority=1),
        Request("http://example.com/old"),  # recorded by an earlier batch
        Request("http://example.com/b"),
        Request("http://example.com/a", priority=1),  # twice in this batch
        Request("http://example.com/a", dont_filter=True),
        Request("http://example.com/lambda", callback=lambda response: None),
        Request("http://example.com/c", priority=1),
    ]
    for request in batch:
        scheduler.enqueue_request(request)
    assert scheduler.send_enqueued()
    assert calls()["evalsha"] == 1
    assert dropped == [batch[1], batch[3]]
    assert server.smembers("demo:dupefilter") == {
        scheduler.df.request_fingerprint(Request(f"http://example.com/{name}")).encode()
        for name in ("old", "a", "b", "lambda", "c")
    }
    urls = [request.url[19:] for request in iter(scheduler.next_request, None)]
    assert urls[0] == "lambda"  # kept in this worker's memory, handed out first
    expected = {
        "FifoQueue": ["a", "b", "a", "c"],
        "LifoQueue": ["c", "a", "b", "a"],
        "PriorityQueue": ["a", "c", "b", "a"],
    }
    assert urls[1:] == expected[queue_cls]


@pytest.mark.parametrize(
    "queue_cls, wrong_key",
    [
        ("FifoQueue", "demo:requests"),  # a PriorityQueue's index where a list is wanted
        ("PriorityQueue", "demo:requests:prio:0"),
        ("PriorityQueue", "demo:dupefilter"),
    ],
)
def test_a_push_onto_a_key_of_another_type_writes_nothing(server, queue_cls, wrong_key):
    """A failed batch is kept and sent again: none of it may be recorded as seen."""
    if wrong_key.endswith(":prio:0"):
        server.set(wrong_key, "not a list")
    else:
        server.zadd(wrong_key, {"0": 0})
    queue = getattr(queue_module, queue_cls)(server, DemoSpider(), "demo:requests")
    candidates = [
        Candidate(f"fp{i}", queue.encode(Request(f"http://example.com/{i}"))) for i in range(5)
    ]
    with pytest.raises(redis.ResponseError, match=f"WRONGTYPE {wrong_key} holds a"):
        queue.push_new(candidates, "demo:dupefilter")
    assert sorted(server.keys()) == [wrong_key.encode()]


def test_links_met_before_are_dropped_without_a_round_trip(settings_dict, server, schedulers):
    scheduler = schedulers({**settings_dict, "SCHEDULER_SEEN_CACHE_SIZE": 2})
    dropped = record_dropped(scheduler)
    for name in "abc":
        scheduler.enqueue_request(Request(f"http://example.com/{name}"))
    scheduler.send_enqueued()  # the cache keeps the two most recent: b and c
    calls = Calls(server, "evalsha", "sismember", "sadd")
    assert scheduler.enqueue_request(Request("http://example.com/c")) is False
    assert scheduler.enqueue_request(Request("http://example.com/b")) is False
    assert calls() == {"evalsha": 0, "sismember": 0, "sadd": 0}
    assert scheduler.stats.get_value("dupefilter/filtered") == 2
    assert dropped == []  # told False: the engine reports them itself
    assert scheduler.enqueue_request(Request("http://example.com/a")) is True  # forgotten...
    scheduler.send_enqueued()
    assert [request.url for request in dropped] == ["http://example.com/a"]  # ...Redis knows
    assert scheduler.enqueue_request(Request("http://example.com/c", dont_filter=True))
    scheduler.flush()  # deletes the shared fingerprints: the cache goes too
    assert scheduler.enqueue_request(Request("http://example.com/b")) is True


class _NoScanOrder(deque):
    """The seen cache's order, counting evictions and refusing to be scanned: finding
    the oldest fingerprint by iterating (``next(iter(...))`` over a dict used as a
    queue) costs a scan of every slot deleted before it, O(n) an eviction."""

    def __init__(self):
        super().__init__()
        self.popped = 0

    def popleft(self):
        self.popped += 1
        return super().popleft()

    def __iter__(self):
        raise AssertionError("the seen cache scanned its order to evict")

    def __getitem__(self, index):
        raise AssertionError("the seen cache indexed its order to evict")


def test_the_seen_cache_evicts_the_oldest_in_one_step_however_long_it_ran(monkeypatch):
    monkeypatch.setattr(SeenCache, "order_type", _NoScanOrder)
    cache = SeenCache(1000)
    epoch = cache.epoch()
    for start in range(0, 50_000, 500):  # batches, as the enqueue buffer adds them
        cache.add((f"fp{i}" for i in range(start, start + 500)), epoch)
    cache.add(["fp49999", "fp49000"], epoch)  # known already: neither added nor evicting
    assert cache.evicted == cache._order.popped == 49_000  # one pop per eviction, no scan
    assert len(cache) == 1000
    assert "fp48999" not in cache and "fp49000" in cache and "fp49999" in cache


def test_a_forget_after_the_first_record_and_before_the_first_hit_is_seen():
    """The seen cache compares the filters' forget counters with those it read before its
    first record (it read them at its first hit, and took a forget in between for the
    baseline: a forgotten URL stayed "seen" in that worker; test_recrawl_e2e's forget
    test failed so under load)."""
    counters, now = [0], [100.0]
    cache = SeenCache(100)
    cache.forgets = lambda: counters[0]
    cache.clock = lambda: now[0]
    cache.add(["fp-a"], cache.epoch())
    counters[0] = 1  # `scrapy redis forget` ran
    now[0] += FORGETS_EVERY
    assert "fp-a" not in cache  # asked of Redis again
    cache.add(["fp-a"], cache.epoch())
    now[0] += FORGETS_EVERY
    assert "fp-a" in cache  # no forget since


def test_without_a_baseline_of_the_forget_counters_the_seen_cache_remembers_nothing():
    def unreachable():
        raise ConnectionError("Redis is down")

    cache = SeenCache(100)
    cache.forgets = unreachable
    cache.add(["fp-a"], cache.epoch())
    assert "fp-a" not in cache and len(cache) == 0


def test_seen_cache_can_be_disabled(settings_dict, server, schedulers):
    scheduler = schedulers({**settings_dict, "SCHEDULER_SEEN_CACHE_SIZE": 0})
    scheduler.enqueue_request(Request("http://example.com/a"))
    scheduler.send_enqueued()
    assert scheduler.enqueue_request(Request("http://example.com/a")) is True
    assert scheduler.send_enqueued()
    assert scheduler.stats.get_value("dupefilter/filtered") == 1


def test_a_dupefilter_of_its_own_is_asked_for_each_request(settings_dict, server, schedulers):
    class OddOnly(RFPDupeFilter):
        def request_seen(self, request):
            return int(request.url.rsplit("/", 1)[1]) % 2 == 0

    scheduler = schedulers({**settings_dict, "DUPEFILTER_CLASS": OddOnly})
    dropped = record_dropped(scheduler)
    for i in range(4):
        scheduler.enqueue_request(Request(f"http://example.com/{i}"))
    scheduler.send_enqueued()
    assert [request.url[-1] for request in dropped] == ["0", "2"]
    assert len(scheduler.queue) == 2


def test_a_failure_half_way_through_a_batch_pushes_nothing_twice(settings_dict, server, schedulers):
    class FailsOnce(RFPDupeFilter):
        calls = 0

        def request_seen(self, request):
            type(self).calls += 1
            if type(self).calls == 2:
                raise redis.ConnectionError("connection lost")
            return super().request_seen(request)

    scheduler = schedulers({**settings_dict, "DUPEFILTER_CLASS": FailsOnce})
    clock = guard_clock(scheduler)
    for i in range(3):
        scheduler.enqueue_request(Request(f"http://example.com/{i}"))
    assert not scheduler.send_enqueued()  # the first was pushed, the second failed
    clock.advance(OutageGuard.MAX_BACKOFF)  # skip the back-off
    assert scheduler.send_enqueued()
    assert len(scheduler.queue) == 3
    assert sorted(request.url for request in iter(scheduler.next_request, None)) == [
        f"http://example.com/{i}" for i in range(3)
    ]


def test_without_one_script_for_both_keys_the_filter_still_holds(
    settings_dict, server, schedulers, monkeypatch
):
    # A Redis Cluster whose dupefilter and queue keys hash to different slots.
    monkeypatch.setattr(Base, "scripts_may_use", lambda self, *keys: False)
    scheduler = schedulers(settings_dict)
    for url in ["http://example.com/a", "http://example.com/b", "http://example.com/a"]:
        scheduler.enqueue_request(Request(url, priority=len(url)))
    scheduler.enqueue_request(Request("http://example.com/a", dont_filter=True))
    assert scheduler.send_enqueued()
    assert sorted(request.url for request in iter(scheduler.next_request, None)) == [
        "http://example.com/a",
        "http://example.com/a",
        "http://example.com/b",
    ]


def test_one_pop_leases_a_prefetch_batch(settings_dict, server, schedulers):
    settings = {**settings_dict, "SCHEDULER_PREFETCH": 4}
    first, second = schedulers(settings), schedulers(settings)
    for i in range(10):
        first.enqueue_request(Request(f"http://example.com/{i}"))
    first.send_enqueued()
    calls = Calls(server, "evalsha")
    assert first.next_request().url == "http://example.com/0"
    assert calls() == {"evalsha": 1}
    assert leased_entries(server) == 4
    assert [first.next_request().url[-1] for _ in range(3)] == ["1", "2", "3"]
    assert calls() == {"evalsha": 0}  # handed out from memory
    assert second.next_request().url == "http://example.com/4"
    assert first.has_pending_requests()
    assert len(first) == 2  # left in Redis (the second worker prefetched 5, 6 and 7)
    assert len(second) == 2 + 3


def test_acks_ride_on_the_next_pop(settings_dict, server, schedulers):
    scheduler = schedulers({**settings_dict, "SCHEDULER_PREFETCH": 2})
    in_progress = stand_in_engine(scheduler)
    for i in range(4):
        scheduler.enqueue_request(Request(f"http://example.com/{i}"))
    taken = [scheduler.next_request(), scheduler.next_request()]
    in_progress.update(taken)
    assert leased_entries(server) == 2
    in_progress.clear()  # both done: their output scheduled
    calls = Calls(server, "evalsha")
    assert scheduler.next_request().url == "http://example.com/2"
    assert calls() == {"evalsha": 1}  # one call released two leases and took two
    assert leased_entries(server) == 2
    assert scheduler.stats.get_value("scheduler/leases/acked") == 2
    assert scheduler.stats.get_value("scheduler/leases/leased") == 4


def test_parent_lease_released_only_after_its_requests_are_in_redis(
    settings_dict, server, schedulers
):
    scheduler = schedulers({**settings_dict, "SCHEDULER_PREFETCH": 1})
    in_progress = stand_in_engine(scheduler)
    scheduler.enqueue_request(Request("http://example.com/parent"))
    parent = scheduler.next_request()
    scheduler.enqueue_request(Request("http://example.com/child"))  # its callback's output
    assert leased_entries(server) == 1
    assert not in_progress  # the parent is done
    child = scheduler.next_request()  # sends the child, then releases the parent
    assert (parent.url, child.url) == ("http://example.com/parent", "http://example.com/child")
    assert leased_entries(server) == 1  # the child's


@pytest.mark.parametrize("queue_cls", ["FifoQueue", "LifoQueue", "PriorityQueue"])
def test_a_dead_workers_batch_comes_back_without_its_done_requests(
    settings_dict, server, schedulers, queue_cls
):
    """One lease per pop, but each request acknowledged on its own: a worker that dies
    after finishing some requests of a batch loses none of the others and repeats none."""
    settings = {
        **settings_dict,
        "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue_cls}",
        "SCHEDULER_PREFETCH": 4,
    }
    clock = Clock()
    dead = schedulers(settings, reactor=clock)  # its heartbeat runs when the test says
    in_progress = stand_in_engine(dead)
    for i in range(6):
        dead.enqueue_request(Request(f"http://example.com/{i}"))
    dead.send_enqueued()
    taken = [dead.next_request() for _ in range(3)]  # one pop of 4: three handed out
    assert server.hlen("demo:requests:leases") == 1
    in_progress.update(taken[0::2])  # the second one is done
    clock.advance(dead.worker_timeout / 3)  # one heartbeat: acknowledges it; then SIGKILL
    assert leased_entries(server) == 3
    assert expire_leases(server) == 1
    live = schedulers(settings)  # recovers the dead worker's leases as it opens
    assert live.stats.get_value("scheduler/leases/recovered") == 3
    stand_in_engine(live)  # every request it hands out is done by the next pop
    left = [r.url[-1] for r in iter(live.next_request, None)]
    expected_first = [taken[0].url[-1], taken[2].url[-1]]
    # Back at the end popped next, in their order; a worker died holding them, so the
    # live worker takes them one at a time (SCHEDULER_MAX_DELIVERIES), others in between.
    assert left[0] == expected_first[0]
    assert [n for n in left if n in expected_first] == expected_first
    assert sorted(left) == sorted(set("012345") - {taken[1].url[-1]})


def test_handed_out_requests_are_not_kept_alive(settings_dict, server, schedulers):
    """Like Scrapy's scheduler, ours keeps no request alive; one that is freed is done
    (the engine holds those it is working on) and released at the next pop."""
    scheduler = schedulers(settings_dict)
    in_progress = stand_in_engine(scheduler)
    for i in range(3):
        scheduler.enqueue_request(Request(f"http://example.com/{i}"))
    first = scheduler.next_request()
    in_progress.add(first)
    freed = weakref.ref(scheduler.next_request())  # handed out, then dropped
    assert freed() is None
    assert leased_entries(server) == 3
    in_progress.add(scheduler.next_request())
    assert scheduler.next_request() is None  # the pop finding the queue empty releases it
    assert leased_entries(server) == 2
    assert scheduler.stats.get_value("scheduler/leases/acked") == 1


def test_without_an_engine_no_request_is_known_done(settings_dict, server, schedulers):
    settings = {**settings_dict, "SCHEDULER_PERSIST": True}
    scheduler = schedulers(settings)
    for name in "ab":
        scheduler.enqueue_request(Request(f"http://example.com/{name}"))
    freed = weakref.ref(scheduler.next_request())
    assert freed() is None and scheduler.next_request().url == "http://example.com/b"
    assert scheduler.next_request() is None
    assert leased_entries(server) == 2  # kept: nothing tells they were crawled
    scheduler.close("shutdown")
    assert scheduler.stats.get_value("scheduler/leases/returned") == 2
    again = schedulers(settings)
    assert [r.url[-1] for r in iter(again.next_request, None)] == ["a", "b"]


def test_release_and_give_back_ignore_positions_outside_the_record(
    settings_dict, server, schedulers
):
    from scrapy_redis.store.scripts import script

    scheduler = schedulers(
        {
            **settings_dict,
            "SCHEDULER_PERSIST": True,
            "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueue",
        }
    )
    for i in range(3):
        scheduler.enqueue_request(Request(f"http://example.com/{i}"))
    scheduler.send_enqueued()
    book = LeaseBook(server, "demo:requests", "test", 10)
    ticket = book.ticket()
    assert len(scheduler.queue.pop_entries(3, ticket=ticket)) == 3
    record = server.hget("demo:requests:leases", ticket.id)
    script("lease_ack")(server, book.keys, [ticket.id, 3, 0, -1, 9])
    assert server.hget("demo:requests:leases", ticket.id) == record
    requeue_keys = [*book.requeue_keys, scheduler.queue.key]
    assert script("lease_requeue")(server, requeue_keys, ["all", 3, ticket.id, 2, 0, 9]) == [0, 0]
    assert server.hget("demo:requests:leases", ticket.id) == record
    assert book.give_back([ticket.id]) == 3


def test_heartbeat_renews_prefetched_leases(settings_dict, server, schedulers):
    clock = Clock()
    scheduler = schedulers(
        {**settings_dict, "SCHEDULER_PREFETCH": 3, "SCHEDULER_WORKER_TIMEOUT": 10},
        reactor=clock,
    )
    for i in range(3):
        scheduler.enqueue_request(Request(f"http://example.com/{i}"))
    scheduler.next_request()
    held = server.zrange("demo:requests:lease_deadlines", 0, -1)
    server.zadd("demo:requests:lease_deadlines", {m: 0 for m in held}, xx=True)
    clock.advance(10 / 3)  # the heartbeat
    deadlines = server.zrange("demo:requests:lease_deadlines", 0, -1, withscores=True)
    assert len(deadlines) == 1 and deadlines[0][1] > 0  # one lease for the pop's three
    assert leased_entries(server) == 3


def test_priorities_across_prefetch_batches(settings_dict, server, schedulers):
    scheduler = schedulers({**settings_dict, "SCHEDULER_PREFETCH": 2})
    for i, priority in enumerate([0, 3, 0, 3, 1, 3, 0]):
        scheduler.enqueue_request(Request(f"http://example.com/{i}", priority=priority))
    order = [request.url[-1] for request in iter(scheduler.next_request, None)]
    assert order == ["1", "3", "5", "4", "0", "2", "6"]


def test_prefetch_of_one_serves_a_later_higher_priority_next(settings_dict, server, schedulers):
    scheduler = schedulers({**settings_dict, "SCHEDULER_PREFETCH": 1})
    for i in range(3):
        scheduler.enqueue_request(Request(f"http://example.com/{i}"))
    assert scheduler.next_request().url == "http://example.com/0"
    scheduler.enqueue_request(Request("http://example.com/urgent", priority=10))
    assert scheduler.next_request().url == "http://example.com/urgent"


def clocked(now: list[float]) -> type[Scheduler]:
    """A Scheduler class whose clock reads ``now[0]``."""

    class ClockedScheduler(Scheduler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, clock=lambda: now[0], **kwargs)

    return ClockedScheduler


def test_batches_follow_the_engines_demand(settings_dict, server, schedulers, monkeypatch):
    """About a quarter second of the hand-out rate, at most twice the last batch (no
    engine: the first pop leases 16, see test_pacing.py for a paced worker)."""
    now = [0.0]
    scheduler = schedulers({**settings_dict, "SCHEDULER_PREFETCH": 64}, clocked(now))
    for i in range(400):
        scheduler.enqueue_request(Request(f"http://example.com/{i}"))
    scheduler.send_enqueued()
    sizes: list[int] = []  # what each pop asked for
    real_pop = scheduler.queue.pop_entries

    def pop_entries(count, timeout=0, ticket=None):
        sizes.append(count)
        return real_pop(count, timeout, ticket)

    monkeypatch.setattr(scheduler.queue, "pop_entries", pop_entries)
    taken = [scheduler.next_request() for _ in range(16 + 32 + 64 + 64)]  # a burst
    assert all(request is not None for request in taken)
    assert sizes == [16, 32, 64, 64]
    assert leased_entries(server) == 16 + 32 + 64 + 64
    for _ in range(64 + 2 + 2):  # then one request every 0.125 s
        assert scheduler.next_request() is not None
        now[0] += 0.125
    assert sizes == [16, 32, 64, 64, 64, 2, 2]  # 64 in 8 s: 2 per quarter second
    for _ in range(2 + 1 + 1):  # one every 0.5 s
        assert scheduler.next_request() is not None
        now[0] += 0.5
    assert sizes == [16, 32, 64, 64, 64, 2, 2, 2, 1, 1]  # 2 in 1 s: 0.5, at least 1


def test_a_prefetch_of_one_never_grows(settings_dict, server, schedulers):
    scheduler = schedulers({**settings_dict, "SCHEDULER_PREFETCH": 1})
    for i in range(5):
        scheduler.enqueue_request(Request(f"http://example.com/{i}"))
    scheduler.send_enqueued()
    calls = Calls(server, "evalsha")
    assert [r.url[-1] for r in iter(scheduler.next_request, None)] == list("01234")
    assert calls()["evalsha"] == 6  # one pop per request, and one finding the queue empty


@pytest.mark.parametrize("queue_cls", ["FifoQueue", "PriorityQueue"])
def test_batches_larger_than_luas_unpack_limit(
    settings_dict, server, schedulers, queue_cls, monkeypatch
):
    """Leasing and releasing thousands of requests in one script call (Lua's unpack()
    takes fewer than 8,000 values)."""
    settings = {
        **settings_dict,
        "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue_cls}",
        "SCHEDULER_PREFETCH": 8192,
        "SCHEDULER_ENQUEUE_BATCH_SIZE": 10000,
        "SCHEDULER_PERSIST": True,
    }
    scheduler = schedulers(settings, clocked([0.0]))  # a burst, however loaded the machine
    in_progress = stand_in_engine(scheduler)
    for i in range(9000):
        scheduler.enqueue_request(Request(f"http://example.com/{i}"))
    scheduler.send_enqueued()
    calls = Calls(server, "evalsha")
    taken = []
    for request in iter(scheduler.next_request, None):
        in_progress.add(request)
        taken.append(request)
    assert len({r.url for r in taken}) == 9000
    assert calls()["evalsha"] <= 11  # 16, 32, ..., 4096, the rest
    assert leased_entries(server) == 9000
    in_progress.difference_update(taken[::2])  # half done: released by the next pop
    assert scheduler.next_request() is None
    assert calls()["evalsha"] == 1
    assert leased_entries(server) == 4500
    scheduler.close("shutdown")  # the other half back at once (RPUSH/LPUSH of 4,096)
    assert scheduler.stats.get_value("scheduler/leases/returned") == 4500
    assert leased_entries(server) == 0
    assert server.zcard("demo:requests:lease_deadlines") == 0
    again = schedulers(settings)
    assert [r.url for r in iter(again.next_request, None)] == [r.url for r in taken[1::2]]


@pytest.mark.parametrize("queue_cls", ["FifoQueue", "LifoQueue", "PriorityQueue"])
def test_a_lease_larger_than_luas_unpack_limit_goes_back_in_order(
    settings_dict, server, schedulers, queue_cls
):
    settings = {
        **settings_dict,
        "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue_cls}",
        "SCHEDULER_ENQUEUE_BATCH_SIZE": 10000,
        "SCHEDULER_PERSIST": True,
    }
    scheduler = schedulers(settings)
    for i in range(9000):
        scheduler.enqueue_request(Request(f"http://example.com/{i}"))
    scheduler.send_enqueued()
    book = LeaseBook(server, "demo:requests", "test", 10)
    ticket = book.ticket()
    popped = [e.data for e in scheduler.queue.pop_entries(9000, ticket=ticket)]
    assert len(popped) == 9000 and server.hlen("demo:requests:leases") == 1
    assert book.give_back([ticket.id]) == 9000  # pushed back in chunks
    again = scheduler.queue.pop_entries(9000)
    assert [e.data for e in again] == popped
    assert not server.exists("demo:requests:leases", "demo:requests:lease_deadlines")


def test_close_sends_buffered_requests(settings_dict, server, schedulers):
    clock = Clock()
    scheduler = schedulers({**settings_dict, "SCHEDULER_PERSIST": True}, reactor=clock)
    scheduler.enqueue_request(Request("http://example.com/a"))
    assert len(clock.getDelayedCalls()) == 3  # the send, the heartbeat, the due requests look
    scheduler.close("finished")
    assert clock.getDelayedCalls() == []
    assert len(PriorityQueue(server, scheduler.spider, "demo:requests")) == 1


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("SCHEDULER_ENQUEUE_DELAY", -1),
        ("SCHEDULER_ENQUEUE_BATCH_SIZE", 0),
        ("SCHEDULER_PREFETCH", 0),
    ],
)
def test_invalid_batch_settings_name_the_setting(settings_dict, setting, value):
    crawler = get_crawler(DemoSpider, {**settings_dict, setting: value})
    with pytest.raises(ValueError, match=setting):
        build_from_crawler(Scheduler, crawler)


def _enqueue_all(redis_url: str, seed: int, results) -> None:
    import random

    crawler = get_crawler(
        DemoSpider,
        {"REDIS_URL": redis_url, "SCHEDULER_ENQUEUE_BATCH_SIZE": 7, "SCHEDULER_PERSIST": True},
    )
    scheduler = build_from_crawler(Scheduler, crawler)
    spider = crawler.spidercls.from_crawler(crawler)
    crawler.spider = spider
    scheduler.open(spider)
    urls = [f"https://example.com/{i}" for i in range(400)]
    random.Random(seed).shuffle(urls)
    for url in urls:
        scheduler.enqueue_request(Request(url, priority=len(url) % 3))
    scheduler.close("finished")
    results.put(scheduler.stats.get_value("dupefilter/filtered", 0))


def test_concurrent_batches_push_each_request_once(server, redis_url):
    """Three processes enqueue the same 400 URLs in batches: each is queued exactly once."""
    filtered = results_of_processes(_enqueue_all, [(redis_url, seed) for seed in range(3)])
    assert sum(filtered) == 800
    queue = PriorityQueue(server, DemoSpider(), "demo:requests")
    urls = []
    while (request := queue.pop()) is not None:
        urls.append(request.url)
    assert sorted(urls) == sorted(f"https://example.com/{i}" for i in range(400))


def subscribed(server, channel: str):
    """A pub/sub connection subscribed to ``channel``, once the server confirmed it (a
    message published before that is not received: on a loaded machine it happened)."""
    pubsub = server.pubsub()
    pubsub.subscribe(channel)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.1)
        if message is not None and message["type"] == "subscribe":
            return pubsub
    raise AssertionError(f"not subscribed to {channel}")


def news_of(pubsub, wait: float = 1.0) -> list[bytes]:
    """The messages published on the subscribed channel within ``wait`` seconds."""
    messages = []
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=min(left, 0.2))
        if message is not None:
            messages.append(message["data"])
    return messages


@pytest.mark.parametrize("queue_cls", ["FifoQueue", "PriorityQueue"])
def test_pushes_and_released_leases_are_announced(settings_dict, server, schedulers, queue_cls):
    scheduler = schedulers(
        {**settings_dict, "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue_cls}"}
    )
    in_progress = stand_in_engine(scheduler)
    pubsub = subscribed(server, "demo:requests:news")
    for i in range(3):
        scheduler.enqueue_request(Request(f"http://example.com/{i}"))
    scheduler.send_enqueued()
    assert news_of(pubsub, 0.3) == [b"3"]  # one message per batch, with the count pushed
    scheduler.enqueue_request(Request("http://example.com/1"))  # a duplicate only
    scheduler.send_enqueued()
    assert news_of(pubsub, 0.3) == []
    taken = [scheduler.next_request() for _ in range(3)]
    in_progress.update(taken)
    assert scheduler.next_request() is None  # still holds its leases: nothing to tell
    assert news_of(pubsub, 0.3) == []
    in_progress.clear()
    assert scheduler.next_request() is None  # its last leases released, queue empty
    assert news_of(pubsub, 0.3) == [b"idle"]
    pubsub.close()


def test_a_worker_closing_with_leases_announces_it_gave_them_back(
    settings_dict, server, schedulers
):
    scheduler = schedulers(settings_dict)
    scheduler.enqueue_request(Request("http://example.com/a"))
    assert scheduler.next_request() is not None
    pubsub = subscribed(server, "demo:requests:news")
    news_of(pubsub, 0.1)
    scheduler.close("shutdown")
    assert news_of(pubsub, 0.3) == [b"returned"]
    pubsub.close()


class _ThreadReactor:
    """Runs what NewsListener hands to the reactor thread at once, recording the thread."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def callFromThread(self, func, *args):  # Twisted's name
        self.threads.append(threading.current_thread().name)
        func(*args)


def test_news_listener_runs_on_news_for_each_message(server):
    heard = threading.Event()
    reactor = _ThreadReactor()
    channel = f"test:news:{time.monotonic_ns()}"  # no other test's listener on it
    listener = NewsListener(server, channel, heard.set, reactor=reactor)
    listener.start()
    listener.start()  # once
    deadline = time.monotonic() + 5
    while not heard.is_set() and time.monotonic() < deadline:
        server.publish(channel, "3")  # until the thread has subscribed
        heard.wait(0.05)
    assert heard.is_set()
    assert reactor.threads and reactor.threads[0] == f"news {channel}"
    listener.stop()
    listener.join(NewsListener.WAIT + 2)
    assert not listener.thread.is_alive()
    assert server.pubsub_numsub(channel) == [(channel.encode(), 0)]


def no_server() -> redis.Redis:
    """A client of a port nothing listens on, failing at once."""
    return redis.Redis(port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))


def test_news_listener_without_a_server_ends_and_leaves_polling(caplog):
    client = no_server()
    listener = NewsListener(client, "demo:requests:news", lambda: None, reactor=_ThreadReactor())
    with caplog.at_level(logging.DEBUG, logger="scrapy_redis.scheduling.wakeup"):
        listener.start()
        listener.join(5)
    assert not listener.thread.is_alive()
    assert "Not listening to demo:requests:news" in caplog.text


def test_news_make_the_watcher_look_at_once():
    from twisted.internet.task import Clock

    clock, looks, wakes = Clock(), [], []
    watcher = QueueWatcher(
        lambda: looks.append(clock.seconds()) or True, lambda: wakes.append(1), clock
    )
    watcher.notify()  # not watching: nothing to do
    assert clock.getDelayedCalls() == []
    watcher.watch()
    clock.advance(0.05)
    watcher.notify()
    clock.advance(0)
    assert looks == [pytest.approx(0.05)] and wakes == [1]
    assert clock.getDelayedCalls() == []


@pytest.mark.parametrize("queue_cls", ["FifoQueue", "PriorityQueue"])
def test_a_user_who_may_not_publish_still_pushes_and_pops(redis_url, server, schedulers, queue_cls):
    """Redis 7 ACL users get no channel by default: the news are lost, nothing else."""
    server.execute_command("ACL", "SETUSER", "nopub", "on", ">pw", "~*", "+@all", "resetchannels")
    try:
        url = redis_url.replace("redis://", "redis://nopub:pw@")
        settings = {
            "REDIS_URL": url,
            "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
            "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
            "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue_cls}",
        }
        scheduler = schedulers(settings)
        in_progress = stand_in_engine(scheduler)
        with pytest.raises(redis.exceptions.NoPermissionError):
            redis.Redis.from_url(url).publish("demo:requests:news", "x")
        for i in range(3):
            scheduler.enqueue_request(Request(f"http://example.com/{i}"))
        assert scheduler.send_enqueued()
        taken = [scheduler.next_request() for _ in range(3)]
        assert [r.url[-1] for r in taken] == ["0", "1", "2"]
        in_progress.clear()
        assert scheduler.next_request() is None  # releases its last leases: cannot tell
        assert leased_entries(server) == 0
        assert scheduler.stats.get_value("scheduler/enqueued/redis") == 3
    finally:
        server.execute_command("ACL", "DELUSER", "nopub")


def test_recovered_leases_are_announced(settings_dict, server, schedulers):
    settings = settings_dict
    dead = schedulers(settings, reactor=Clock())  # SIGKILL: no heartbeat, no close
    dead.enqueue_request(Request("http://example.com/a"))
    assert dead.next_request() is not None
    clock = Clock()
    live = schedulers(settings, reactor=clock)
    pubsub = subscribed(server, "demo:requests:news")
    news_of(pubsub, 0.1)
    assert expire_leases(server) == 1
    clock.advance(live.worker_timeout / 3)  # the live worker's heartbeat
    assert news_of(pubsub, 0.3) == [b"recovered"]
    pubsub.close()


def test_news_listener_listens_again_after_a_failure(monkeypatch):
    client = no_server()
    listener = NewsListener(client, "demo:requests:news", lambda: None, reactor=_ThreadReactor())
    listener.start()
    listener.join(5)
    first = listener.thread
    listener.start()  # failed under RETRY seconds ago: not again yet
    assert listener.thread is first
    monkeypatch.setattr(NewsListener, "RETRY", 0.0)
    listener.start()
    assert listener.thread is not first
    listener.stop()
    listener.join(5)
    listener.start()  # stopped: never again
    assert not listener.thread.is_alive()


def test_a_listener_whose_connection_was_lost_listens_again_at_once(server, monkeypatch):
    """A Redis restart or failover drops the subscription of a listener that worked: the
    next start() listens again, not RETRY (30) seconds later."""
    monkeypatch.setattr(NewsListener, "LISTENED", 0.2)
    channel = f"test:news:{time.monotonic_ns()}"
    heard = threading.Event()
    listener = NewsListener(server, channel, heard.set, reactor=_ThreadReactor())
    listener.start()
    first = listener.thread
    # listening for longer than LISTENED, as the listener counts it (from its own
    # subscription, not from when this thread noticed it)
    wait_until(lambda: (since := listener.listening_since) is not None
               and time.monotonic() - since > NewsListener.LISTENED)  # fmt: skip
    assert server.pubsub_numsub(channel)[0][1] == 1
    server.client_kill_filter(_type="pubsub")  # the connection is lost
    listener.join(30)
    assert not first.is_alive()
    listener.start()
    assert listener.thread is not first  # at once
    # It hears the news. (Not PUBSUB NUMSUB: redis-py 8 reconnects the lost connection and
    # subscribes it again before the first listener gives up and closes it, so a count of
    # 1 may be that connection, gone the next moment: 1 run in 8 under load.)
    deadline = time.monotonic() + 30  # a bound for a stalled machine, not a wait
    while not heard.is_set() and listener.thread.is_alive():
        assert time.monotonic() < deadline, "the second listener never heard the news"
        server.publish(channel, "news")  # until its thread has subscribed
        heard.wait(0.05)
    assert heard.is_set(), "the second listener ended without hearing the news"
    listener.stop()
    listener.join(30)


def wait_until(condition, timeout: float = 30) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` s (a bound for a stalled
    machine, not a wait: it returns as soon as the condition holds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not true within {timeout}s"
        time.sleep(0.02)


def test_an_idle_worker_on_a_test_clock_keeps_listening_to_the_news(
    settings_dict, server, schedulers, caplog
):
    # Scheduler.reactor runs the timers; the news listener is a thread, which hands the
    # news to Twisted's reactor as before (a task.Clock cannot take calls from threads).
    scheduler = schedulers(settings_dict, reactor=Clock())
    channel = "demo:requests:news"
    with caplog.at_level(logging.DEBUG, logger="scrapy_redis.scheduling.wakeup"):
        assert scheduler.next_request() is None  # idles: listens to the news channel
        deadline = time.monotonic() + 5
        while server.pubsub_numsub(channel)[0][1] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.pubsub_numsub(channel)[0][1] == 1
        server.publish(channel, "idle")
        deadline = time.monotonic() + NewsListener.WAIT + 0.5
        while server.pubsub_numsub(channel)[0][1] == 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.pubsub_numsub(channel)[0][1] == 1, "the listener stopped"
    assert "Not listening" not in caplog.text
