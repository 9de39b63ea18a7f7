"""A request going out late checks that its slot's start is still its own
(politeness.late): the scripts on a real redis-server, on its clock; Scrapy's downloader
slots (held while a late request waits) as in test_politeness_early.py."""

from __future__ import annotations

import time

from twisted.internet.task import Clock

from helpers import make_spider
from scrapy_redis.politeness.hold import SlotHolds
from scrapy_redis.politeness.late import LATE
from scrapy_redis.politeness.pacing import PolitePacing
from scrapy_redis.queues.leases import LeaseBook
from scrapy_redis.scheduling.pacing import Pacer
from test_politeness import KEY, make_queue, push, slot_state, take
from test_politeness_early import Downloader, take_when_given

SETTINGS = {"DOWNLOAD_DELAY": 0.1, "RANDOMIZE_DOWNLOAD_DELAY": False}


def worker(server):
    """A worker's queue (reporting starts) and its pacing, with a downloader whose slot
    "a" can be held, on a clock the test advances."""
    queue = make_queue(server, SETTINGS)
    queue.reports_starts = True
    spider = make_spider(SETTINGS)
    clock = Clock()
    pacing = PolitePacing(Pacer(prefetch=8), spider.crawler, spider, clock)
    pacing.queues = [queue]
    downloader = Downloader(False)
    pacing._holds = SlotHolds(downloader, clock, lambda: spider)
    return queue, pacing, downloader, clock


def popped(queue, name: str):
    """The first request ``name`` takes, and the time it may start (time.monotonic())."""
    entries, _ = take(queue, LeaseBook(queue.server, KEY, name, 30), 1)
    request = queue.decode(entries[0])
    return request, queue.start_at[request]


def stat(pacing, key: str) -> int:
    return pacing.crawler.stats.get_value(key, 0)


def test_a_request_on_time_goes_without_asking(server):
    queue, pacing, _, _ = worker(server)
    push(queue, "http://a/0", "http://a/1")
    request, since = popped(queue, "w1")
    assert since <= time.monotonic()  # may start now: its start is the pop's reply
    ran: list[str] = []
    pacing.late.go(request, "a", "a", since, lambda: ran.append("go"))
    assert ran == ["go"] and stat(pacing, "scheduler/fleet/late") == 0


def test_a_late_request_whose_start_is_still_its_own_goes_at_once(server):
    queue, pacing, downloader, _ = worker(server)
    push(queue, "http://a/0", "http://a/1")
    request, since = popped(queue, "w1")
    ran: list[str] = []
    pacing.late.go(request, "a", "a", since - LATE - 0.5, lambda: ran.append("go"))
    assert ran == ["go"] and downloader.slots["a"].latercall is None
    assert stat(pacing, "scheduler/fleet/late") == 1
    assert stat(pacing, "scheduler/fleet/late_lost") == 0
    state = slot_state(server, "a")
    assert state[13] == queue.ids[request] and state[8] > 0  # still its start, unreported


def test_a_request_that_lost_its_start_waits_for_a_new_one(server):
    """Its worker stalled past the delay plus the 3 s the slot waits for a report:
    another worker started the slot. It must not go with that one, but after it."""
    queue, pacing, downloader, clock = worker(server)
    other = make_queue(server, SETTINGS)
    other.reports_starts = True
    push(queue, "http://a/0", "http://a/1", "http://a/2")
    request, since = popped(queue, "w1")  # its start never reported: the worker stalls
    book = LeaseBook(server, KEY, "w2", 30)
    take_when_given(other, book, time.monotonic() + 15)  # after the grace
    ran: list[str] = []
    pacing.late.go(request, "a", "a", since, lambda: ran.append("go"))
    assert ran == [] and downloader.slots["a"].latercall is not None  # held
    assert stat(pacing, "scheduler/fleet/late_lost") == 1
    other.started("a")  # the other worker's request left: the next start in 0.1 s
    reported = time.monotonic()
    deadline = reported + 10
    while not ran:
        assert time.monotonic() < deadline, "the late request never got a new start"
        clock.advance(1)  # (the hold asks again at most a second later)
        time.sleep(0.01)
    assert time.monotonic() - reported >= 0.09  # not before the delay after the other's
    state = slot_state(server, "a")
    assert state[13] == queue.ids[request] and state[8] > 0  # its new start, unreported
    assert downloader.processed  # its downloader slot let go
