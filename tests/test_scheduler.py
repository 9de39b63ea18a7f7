"""The Redis scheduler, built through Scrapy's crawler as the engine builds it."""

from __future__ import annotations

import logging
import pickle
import time

import pytest
from scrapy import Request
from scrapy.dupefilters import BaseDupeFilter
from scrapy.dupefilters import RFPDupeFilter as ScrapyRFPDupeFilter
from scrapy.utils.misc import load_object
from twisted.internet.task import Clock

from helpers import expire_leases, leased_entries, open_scheduler, record_dropped, stand_in_engine
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.queue import Base, FifoQueue, PriorityQueue
from scrapy_redis.scheduler import Scheduler


def test_reads_settings(settings_dict, server, schedulers):
    scheduler = schedulers(
        {
            **settings_dict,
            "SCHEDULER_PERSIST": True,
            "SCHEDULER_FLUSH_ON_START": True,
            "SCHEDULER_IDLE_BEFORE_CLOSE": 2,
            "SCHEDULER_QUEUE_KEY": "q:%(spider)s",
            "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueue",
            "SCHEDULER_DUPEFILTER_KEY": "df:%(spider)s",
            "SCHEDULER_SERIALIZER": "scrapy_redis.picklecompat",
        }
    )
    assert scheduler.persist and scheduler.flush_on_start
    assert scheduler.idle_before_close == 2
    assert isinstance(scheduler.queue, FifoQueue)
    assert scheduler.queue.key == "q:demo"
    assert isinstance(scheduler.df, RFPDupeFilter)
    assert scheduler.df.key == "df:demo"
    assert scheduler.serializer is load_object("scrapy_redis.picklecompat")
    assert scheduler.server is scheduler.df.server  # one client per crawler
    assert scheduler.spider.name == "demo"


def test_defaults(settings_dict, server, schedulers):
    scheduler = schedulers(settings_dict)
    assert isinstance(scheduler.queue, PriorityQueue)
    assert scheduler.queue.key == "demo:requests"
    assert scheduler.df.key == "demo:dupefilter"
    assert scheduler.persist is False


def test_enqueue_dedup_dequeue_and_stats(settings_dict, server, schedulers):
    scheduler = schedulers(settings_dict)
    stats = scheduler.stats
    dropped = record_dropped(scheduler)
    duplicate = Request("http://example.com/a")
    # Buffered: the duplicate is found when the batch is sent, and reported then.
    assert scheduler.enqueue_request(Request("http://example.com/a")) is True
    assert scheduler.enqueue_request(duplicate) is True
    assert scheduler.enqueue_request(Request("http://example.com/a", dont_filter=True)) is True
    assert not server.exists("demo:dupefilter")  # nothing sent yet
    assert len(scheduler) == 2
    assert dropped == [duplicate]
    assert scheduler.has_pending_requests()
    assert scheduler.next_request().url == "http://example.com/a"
    assert scheduler.next_request().url == "http://example.com/a"
    assert scheduler.next_request() is None
    assert not scheduler.has_pending_requests()
    assert stats.get_value("scheduler/enqueued/redis") == 2
    assert stats.get_value("scheduler/dequeued/redis") == 2
    assert stats.get_value("dupefilter/filtered") == 1


def test_project_without_dupefilter_class_gets_the_shared_filter(redis_url, server, schedulers):
    scheduler = schedulers({"REDIS_URL": redis_url})
    assert isinstance(scheduler.df, RFPDupeFilter)


def test_base_dupefilter_disables_dedup(settings_dict, server, schedulers):
    scheduler = schedulers(
        {**settings_dict, "DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter"}
    )
    assert type(scheduler.df) is BaseDupeFilter
    assert scheduler.enqueue_request(Request("http://example.com/a")) is True
    assert scheduler.enqueue_request(Request("http://example.com/a")) is True
    assert len(scheduler) == 2


def test_enqueue_without_delay_answers_false_for_duplicates(settings_dict, server, schedulers):
    scheduler = schedulers({**settings_dict, "SCHEDULER_ENQUEUE_DELAY": 0})
    dropped = record_dropped(scheduler)
    assert scheduler.enqueue_request(Request("http://example.com/a")) is True
    assert server.scard("demo:dupefilter") == 1  # sent at once
    assert scheduler.enqueue_request(Request("http://example.com/a")) is False
    assert dropped == []  # the engine sends request_dropped itself when told False
    assert scheduler.stats.get_value("dupefilter/filtered") == 1


def test_scrapys_own_dupefilter(settings_dict, server, schedulers):
    scheduler = schedulers(
        {
            **settings_dict,
            "DUPEFILTER_CLASS": "scrapy.dupefilters.RFPDupeFilter",
            "SCHEDULER_ENQUEUE_DELAY": 0,
        }
    )
    assert type(scheduler.df) is ScrapyRFPDupeFilter
    assert scheduler.enqueue_request(Request("http://example.com/a")) is True
    assert scheduler.enqueue_request(Request("http://example.com/a")) is False
    scheduler.flush()  # Scrapy's filters have no clear(): only the queue is emptied
    assert len(scheduler.queue) == 0
    scheduler.close("finished")


def test_close_without_persist_keeps_data_other_workers_use(settings_dict, server, schedulers):
    first, second = schedulers(settings_dict), schedulers(settings_dict)
    first.enqueue_request(Request("http://example.com/a", priority=2))
    second.enqueue_request(Request("http://example.com/b"))
    first.close("finished")
    assert first.cleared_shared_data is False
    assert server.exists("demo:requests", "demo:dupefilter") == 2
    assert second.next_request().url == "http://example.com/a"
    second.close("finished")
    assert second.cleared_shared_data is True
    assert server.keys("demo:*") == []


def test_close_with_persist_keeps_everything(settings_dict, server, schedulers):
    scheduler = schedulers({**settings_dict, "SCHEDULER_PERSIST": True})
    scheduler.enqueue_request(Request("http://example.com/a"))
    scheduler.close("finished")
    assert server.exists("demo:requests", "demo:requests:prio:0", "demo:dupefilter") == 3
    assert not server.exists("demo:requests:workers")


def test_resume_logs_pending_requests(settings_dict, server, schedulers, caplog):
    first = schedulers({**settings_dict, "SCHEDULER_PERSIST": True})
    for i in range(3):
        first.enqueue_request(Request(f"http://example.com/{i}"))
    first.close("shutdown")
    with caplog.at_level(logging.DEBUG, logger="demo"):  # spider.log()'s route
        second = schedulers({**settings_dict, "SCHEDULER_PERSIST": True})
    assert "Resuming crawl (3 requests scheduled)" in caplog.text
    assert second.next_request().url == "http://example.com/0"


def test_dead_worker_does_not_block_cleanup(settings_dict, server, schedulers):
    # Its heartbeat runs on a clock nobody advances: it dies, no more heartbeats.
    schedulers({**settings_dict, "SCHEDULER_WORKER_TIMEOUT": 0.2}, reactor=Clock())
    live = schedulers(settings_dict)
    live.enqueue_request(Request("http://example.com/a"))
    time.sleep(0.3)
    live.close("finished")
    assert live.cleared_shared_data is True
    assert server.keys("demo:*") == []


def test_flush_on_start_only_when_alone(settings_dict, server, schedulers):
    settings = {**settings_dict, "SCHEDULER_FLUSH_ON_START": True}
    server.sadd("demo:dupefilter", "stale")
    first = schedulers(settings)
    assert not server.exists("demo:dupefilter")
    first.enqueue_request(Request("http://example.com/a"))
    assert first.send_enqueued()
    schedulers(settings)  # a late joiner must not wipe the running crawl
    assert len(first.queue) == 1
    assert server.scard("demo:dupefilter") == 1


def test_requests_leased_by_another_worker_keep_scheduler_pending(
    settings_dict, server, schedulers
):
    idle, busy = schedulers(settings_dict), schedulers(settings_dict)
    idle.enqueue_request(Request("http://example.com/a"))
    idle.send_enqueued()
    request = busy.next_request()
    assert request.url == "http://example.com/a"
    assert leased_entries(server) == 1
    assert idle.next_request() is None
    assert idle.has_pending_requests()  # busy may produce requests, or die
    busy.close("shutdown")  # graceful stop: the request goes back at once
    assert busy.stats.get_value("scheduler/leases/returned") == 1
    assert idle.next_request().url == "http://example.com/a"


def test_unserializable_request_kept_in_memory(settings_dict, server, schedulers, caplog):
    scheduler = schedulers(settings_dict)
    bad = Request("http://example.com/lambda", callback=lambda response: None)
    with caplog.at_level(logging.WARNING, logger="scrapy_redis.scheduler"):
        assert scheduler.enqueue_request(bad) is True
        assert (
            scheduler.enqueue_request(Request("http://example.com/obj", meta={"o": object()}))
            is True
        )
        scheduler.send_enqueued()
    assert caplog.text.count("Unable to serialize request") == 1
    assert scheduler.stats.get_value("scheduler/unserializable") == 2
    assert len(scheduler.queue) == 0
    assert scheduler.has_pending_requests()
    assert scheduler.next_request() is bad
    assert scheduler.next_request().url == "http://example.com/obj"
    assert scheduler.stats.get_value("scheduler/dequeued/memory") == 2


def test_pickled_queue_without_pickle_stops_worker_and_keeps_data(
    settings_dict, server, schedulers, caplog
):
    legacy = pickle.dumps(Request("http://example.com/old").to_dict(), protocol=5)
    server.execute_command("ZADD", "demo:requests", 0, legacy)
    scheduler = schedulers(settings_dict)
    with caplog.at_level(logging.ERROR, logger="scrapy_redis.scheduler"):
        assert scheduler.next_request() is None
    assert "SCHEDULER_SERIALIZER = 'scrapy_redis.picklecompat'" in caplog.text
    assert not scheduler.has_pending_requests()
    assert server.zrange("demo:requests", 0, -1) == [legacy]
    scheduler.close("scheduler_serializer_error")  # the last worker, not persisting...
    assert server.zrange("demo:requests", 0, -1) == [legacy]  # ...still keeps the data


def test_pickled_queue_read_with_picklecompat(settings_dict, server, schedulers):
    legacy = pickle.dumps(Request("http://example.com/old").to_dict(), protocol=5)
    server.execute_command("ZADD", "demo:requests", 0, legacy)
    scheduler = schedulers({**settings_dict, "SCHEDULER_SERIALIZER": "scrapy_redis.picklecompat"})
    assert scheduler.next_request().url == "http://example.com/old"


def test_undecodable_entry_is_skipped_and_kept(settings_dict, server, schedulers):
    server.lpush("demo:requests", b"\xc1\xff\xff")
    server.lpush("demo:requests", b"\xc1\x81\x00\xa3bad")  # msgpack, but no request
    scheduler = schedulers(
        {**settings_dict, "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueue"}
    )
    scheduler.enqueue_request(Request("http://example.com/ok"))
    assert scheduler.next_request().url == "http://example.com/ok"
    assert scheduler.stats.get_value("scheduler/invalid/redis") == 2
    assert server.llen("demo:requests:invalid") == 2


def test_idle_before_close_is_a_grace_period_not_a_blocking_pop(settings_dict, server, schedulers):
    scheduler = schedulers({**settings_dict, "SCHEDULER_IDLE_BEFORE_CLOSE": 0.3})
    started = time.monotonic()
    assert scheduler.next_request() is None
    assert time.monotonic() - started < 0.1
    assert scheduler.has_pending_requests()
    time.sleep(0.35)
    assert not scheduler.has_pending_requests()


def test_negative_idle_before_close_rejected(settings_dict, server):
    with pytest.raises(ValueError, match="SCHEDULER_IDLE_BEFORE_CLOSE"):
        open_scheduler({**settings_dict, "SCHEDULER_IDLE_BEFORE_CLOSE": -1})


def test_bad_queue_class_error_names_setting(settings_dict, server):
    with pytest.raises(ValueError, match="SCHEDULER_QUEUE_CLASS"):
        open_scheduler({**settings_dict, "SCHEDULER_QUEUE_CLASS": "builtins.object"})


class OldStyleScheduler(Scheduler):
    """A third-party subclass that replaces open() as written for the original."""

    def open(self, spider):
        self.spider = spider
        self.queue = load_object(self.queue_cls)(
            server=self.server,
            spider=spider,
            key=self.queue_key % {"spider": spider.name},
            serializer=self.serializer,
        )
        self.df = load_object(self.dupefilter_cls).from_spider(spider)
        if self.flush_on_start:
            self.flush()


def test_subclass_overriding_open_the_old_way(settings_dict, server, schedulers):
    scheduler = schedulers(settings_dict, OldStyleScheduler)
    assert scheduler.enqueue_request(Request("http://example.com/a"))
    assert scheduler.has_pending_requests()
    assert scheduler.next_request().url == "http://example.com/a"
    scheduler.close("finished")
    assert server.keys("demo:*") == []


def test_queue_watcher_backs_off_and_wakes_the_engine():
    from twisted.internet.task import Clock

    from scrapy_redis.scheduling.wakeup import QueueWatcher

    clock, state, wakes = Clock(), {"empty": True}, []
    watcher = QueueWatcher(lambda: not state["empty"], lambda: wakes.append(clock.seconds()), clock)
    watcher.watch()
    watcher.watch()  # already watching: no second timer
    assert len(clock.getDelayedCalls()) == 1
    clock.advance(0.1)
    clock.advance(0.2)
    clock.advance(0.4)
    assert clock.getDelayedCalls()[0].getTime() == pytest.approx(0.7 + 0.8)
    state["empty"] = False
    clock.advance(0.8)
    assert wakes == [pytest.approx(1.5)]
    assert clock.getDelayedCalls() == []
    watcher.watch()  # back-off was reset
    assert clock.getDelayedCalls()[0].getTime() == pytest.approx(1.6)
    watcher.stop()
    assert clock.getDelayedCalls() == []


def test_dead_workers_leases_are_recovered_in_their_priority(settings_dict, server, schedulers):
    settings = settings_dict
    dead = schedulers(settings, reactor=Clock())  # SIGKILL: no heartbeat, no close
    dead.enqueue_request(Request("http://example.com/a", priority=5))
    dead.enqueue_request(Request("http://example.com/b"))
    assert dead.next_request().url == "http://example.com/a"
    clock = Clock()
    live = schedulers(settings, reactor=clock)
    assert live.next_request().url == "http://example.com/b"
    assert expire_leases(server) == 2  # the live worker's own too: it renews it
    clock.advance(live.worker_timeout / 3)  # its heartbeat: renews its own, recovers the dead's
    assert live.stats.get_value("scheduler/leases/recovered") == 1
    recovered = live.next_request()
    assert (recovered.url, recovered.priority) == ("http://example.com/a", 5)
    assert leased_entries(server) == 2  # both now held by the live worker


def test_leases_released_when_the_engine_is_done(settings_dict, server, schedulers):
    from types import SimpleNamespace

    scheduler = schedulers(settings_dict)
    slot = SimpleNamespace(inprogress=set(), closing=None, nextcall=None)
    scheduler.crawler.engine = SimpleNamespace(_slot=slot, running=True)
    for name in "ab":
        scheduler.enqueue_request(Request(f"http://example.com/{name}"))
    first = scheduler.next_request()
    slot.inprogress.add(first)  # as the engine does with what it takes
    second = scheduler.next_request()
    slot.inprogress.add(second)
    assert leased_entries(server) == 2
    slot.inprogress.discard(first)  # downloaded, parsed, its output scheduled
    assert scheduler.next_request() is None
    assert leased_entries(server) == 1
    assert scheduler.stats.get_value("scheduler/leases/acked") == 1
    scheduler.close("shutdown")  # the second is not done: back to the queue at once
    assert scheduler.stats.get_value("scheduler/leases/returned") == 1
    assert leased_entries(server) == 0


@pytest.mark.parametrize("queue_cls", ["FifoQueue", "LifoQueue", "PriorityQueue"])
def test_returned_leases_keep_queue_order(settings_dict, server, schedulers, queue_cls):
    settings = {
        **settings_dict,
        "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue_cls}",
        "SCHEDULER_PERSIST": True,
    }
    first = schedulers(settings)
    for name in "abcd":
        first.enqueue_request(Request(f"http://example.com/{name}"))
    taken = [first.next_request().url[-1] for _ in range(2)]
    first.close("shutdown")
    second = schedulers(settings)
    assert [second.next_request().url[-1] for _ in range(4)][:2] == taken


class OwnListQueue(Base):
    """A third-party queue class implementing the original's contract only."""

    def __len__(self):
        return self.server.llen(self.key)

    def push(self, request):
        self.server.lpush(self.key, self._encode_request(request))

    def pop(self, timeout=0):
        data = self.server.rpop(self.key)
        return self._decode_request(data) if data else None


class FifoWithOwnPop(FifoQueue):
    popped = 0

    def pop(self, timeout=0):
        type(self).popped += 1
        return super().pop(timeout)


@pytest.mark.parametrize("queue_cls", [OwnListQueue, FifoWithOwnPop])
def test_queue_classes_of_their_own_are_popped_with_their_pop(
    settings_dict, server, schedulers, queue_cls
):
    scheduler = schedulers({**settings_dict, "SCHEDULER_QUEUE_CLASS": queue_cls})
    scheduler.enqueue_request(Request("http://example.com/a"))
    assert scheduler.next_request().url == "http://example.com/a"
    assert scheduler.next_request() is None
    assert not server.exists("demo:requests:leases")  # no leases: their pop is theirs
    if queue_cls is FifoWithOwnPop:
        assert FifoWithOwnPop.popped == 2


class FifoDeclaredUnleased(FifoQueue):
    """Opts out of leases by its declared attribute, without overriding a method."""

    uses_leases = False


class OwnPopDeclaredLeased(FifoQueue):
    """Declares leases although it overrides pop(): the scheduler never calls its pop()."""

    uses_leases = True

    def pop(self, timeout=0):
        raise AssertionError("popped through pop_entries(), not pop()")


def test_queue_classes_declare_whether_they_use_leases():
    assert FifoQueue.uses_leases and not Base.uses_leases
    assert not OwnListQueue.uses_leases and not FifoWithOwnPop.uses_leases  # derived
    assert not FifoDeclaredUnleased.uses_leases and OwnPopDeclaredLeased.uses_leases
    assert OwnListQueue.uses_push_script is False and FifoQueue.uses_push_script is True


@pytest.mark.parametrize("queue_cls", [FifoDeclaredUnleased, OwnPopDeclaredLeased])
def test_the_declared_attribute_decides_leases(settings_dict, server, schedulers, queue_cls):
    scheduler = schedulers({**settings_dict, "SCHEDULER_QUEUE_CLASS": queue_cls})
    scheduler.enqueue_request(Request("http://example.com/a"))
    assert scheduler.next_request().url == "http://example.com/a"
    assert server.exists("demo:requests:leases") == queue_cls.uses_leases


def test_idle_worker_is_woken_when_the_other_workers_finish(settings_dict, server, schedulers):
    clock, wakes = Clock(), []
    idle, busy = schedulers(settings_dict, reactor=clock), schedulers(settings_dict)
    stand_in_engine(idle, wake=lambda: wakes.append(clock.seconds()))
    in_progress = stand_in_engine(busy)
    idle.enqueue_request(Request("http://example.com/a"))
    idle.send_enqueued()
    in_progress.add(busy.next_request())  # leased by the busy worker
    assert idle.next_request() is None  # starts watching: others hold leases
    clock.advance(0.1)
    assert wakes == []
    in_progress.clear()  # its work is done
    assert busy.next_request() is None  # the engine asks for more: releases its lease
    clock.advance(0.2)
    assert wakes == [pytest.approx(0.3)]  # time to re-check idleness (and close)


def test_the_spiders_and_stats_see_our_scheduler_through_its_protocol(schedulers, settings_dict):
    from scrapy.core.scheduler import Scheduler as ScrapyScheduler

    from scrapy_redis.scheduling.api import SharedScheduler

    assert isinstance(schedulers(settings_dict), SharedScheduler)
    assert not isinstance(ScrapyScheduler.__new__(ScrapyScheduler), SharedScheduler)
