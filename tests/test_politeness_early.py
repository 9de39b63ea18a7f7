"""Requests handed out a little before their slot's start (SCHEDULER_FLEET_EARLY), held by
the worker until then: the pop script on a real redis-server, on its clock (waits are
polled with deadlines, never slept)."""

from __future__ import annotations

import time

import pytest

from scrapy_redis.exceptions import ConfigurationError
from scrapy_redis.politeness.queue import SlotQueue
from scrapy_redis.queues.leases import LeaseBook
from test_politeness import KEY, make_queue, push, slot_state, take, urls

DELAY = {"DOWNLOAD_DELAY": 2, "RANDOMIZE_DOWNLOAD_DELAY": False}


def holding_queue(server, early: float = 1.0, settings=None) -> SlotQueue:
    """A worker's queue that reports starts and holds requests handed out early."""
    queue = make_queue(server, {**DELAY, "SCHEDULER_FLEET_EARLY": early, **(settings or {})})
    queue.reports_starts = True
    queue.holds = lambda: True
    return queue


def take_when_given(queue: SlotQueue, book: LeaseBook, deadline: float):
    """Pops until it takes something (polling, with a deadline)."""
    while True:
        entries, lease = take(queue, book, 10)
        if entries:
            return entries, lease
        assert time.monotonic() < deadline, "nothing handed out in time"
        time.sleep(0.01)


def test_a_request_is_handed_out_early_with_the_time_it_may_start(server):
    first, second = holding_queue(server), holding_queue(server)
    push(first, "http://a/0", "http://a/1", "http://a/2")
    got, _ = take(first, LeaseBook(server, KEY, "w1", 30), 10)
    assert urls(first, got) == ["http://a/0"]  # may start now: no start time to wait for
    assert got[0].start_at is not None and got[0].start_at <= time.monotonic()  # the reply's
    assert 1.99 <= first.started("a") <= 2  # its start reported: the next in 2 s
    reported = time.monotonic()
    book = LeaseBook(server, KEY, "w2", 30)
    assert take(second, book, 10)[0] == []
    assert 0.9 < second.next_start_in <= 1.0  # it may take it 1 s (the horizon) early
    got, _ = take_when_given(second, book, reported + 10)
    taken = time.monotonic()
    assert urls(second, got) == ["http://a/1"]
    assert taken - reported >= 0.99  # not before the horizon
    start_at = got[0].start_at
    assert start_at is not None and start_at > taken  # to hold until its start
    assert start_at - reported >= 1.99  # never before the slot's start (server clock)
    request = second.decode(got[0])
    assert second.start_at[request] == start_at


def test_a_request_held_early_blocks_the_slot_until_its_start_is_reported(server):
    holder, other = holding_queue(server), holding_queue(server)
    push(holder, "http://a/0", "http://a/1", "http://a/2")
    take(holder, LeaseBook(server, KEY, "w1", 30), 10)
    holder.started("a")
    book = LeaseBook(server, KEY, "w2", 30)
    got, _ = take_when_given(holder, book, time.monotonic() + 10)
    start_at = got[0].start_at
    assert start_at is not None
    others = LeaseBook(server, KEY, "w3", 30)
    while time.monotonic() < start_at + 0.3:  # its start passed, not reported yet
        assert take(other, others, 10)[0] == []
        time.sleep(0.02)
    assert 1.99 <= holder.started("a") <= 2  # reported: the next start 2 s from now
    assert take(other, others, 10)[0] == []
    assert 0.9 < other.next_start_in <= 1.0


def test_a_worker_that_does_not_hold_takes_requests_only_at_their_start(server):
    for queue in (holding_queue(server, early=0), make_queue(server, DELAY)):
        queue.reports_starts = True
        push(queue, "http://a/0", "http://a/1")
        take(queue, LeaseBook(server, KEY, "w1", 30), 10)
        queue.started("a")
        book = LeaseBook(server, KEY, "w2", 30)
        assert take(queue, book, 10)[0] == []
        assert 1.9 < queue.next_start_in <= 2.0
        server.flushdb()


def test_an_early_request_takes_a_place_under_the_fleets_concurrency(server):
    queue = holding_queue(server, settings={"CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    push(queue, "http://a/0", "http://a/1")
    book = LeaseBook(server, KEY, "w1", 30)
    _, lease = take(queue, book, 10)
    queue.started("a")
    deadline = time.monotonic() + 1.5  # within the horizon: still the one in flight
    while time.monotonic() < deadline:
        assert take(queue, book, 10)[0] == []
        time.sleep(0.05)
    book.release([(lease, [1])])
    got, _ = take_when_given(queue, book, time.monotonic() + 10)
    assert urls(queue, got) == ["http://a/1"]


def test_a_retried_pop_tells_the_start_of_what_it_had_taken_early(server):
    queue = holding_queue(server)
    push(queue, "http://a/0", "http://a/1")
    take(queue, LeaseBook(server, KEY, "w1", 30), 10)
    queue.started("a")
    book = LeaseBook(server, KEY, "w2", 30)
    deadline = time.monotonic() + 10
    while True:
        ticket = book.ticket()
        got = queue.pop_entries(10, ticket=ticket)
        if got:
            break
        assert time.monotonic() < deadline
        time.sleep(0.01)
    again = queue.pop_entries(10, ticket=ticket)  # its reply was lost: the same lease
    assert [e.data for e in again] == [e.data for e in got]
    assert again[0].start_at is not None
    assert abs(again[0].start_at - got[0].start_at) < 0.5


@pytest.mark.parametrize("early", [-0.1, 1.5])
def test_an_early_beyond_a_second_names_the_setting(server, early):
    with pytest.raises(ConfigurationError, match="SCHEDULER_FLEET_EARLY"):
        holding_queue(server, early=early)


class Downloader:
    """The two parts of Scrapy's downloader that holding uses: its slots, and what lets a
    slot start its queued requests (Scrapy < 2.14: with the spider first)."""

    def __init__(self, takes_spider: bool) -> None:
        from scrapy.core.downloader import Slot

        self.slots = {"a": Slot(1, 0, 0)}
        self.processed: list[tuple] = []
        if takes_spider:
            self._process_queue = lambda spider, slot: self.processed.append((spider, slot))
        else:
            self._process_queue = lambda slot: self.processed.append((slot,))


@pytest.mark.parametrize("takes_spider", [False, True])
def test_a_held_slot_starts_at_the_time_given_or_later_after_a_retry_after(takes_spider):
    from twisted.internet.task import Clock

    from scrapy_redis.politeness.hold import SlotHolds, can_hold

    downloader, clock = Downloader(takes_spider), Clock()
    assert can_hold(downloader) and not can_hold(object())
    holds = SlotHolds(downloader, clock, lambda: "spider")
    ran: list[str] = []
    now = time.monotonic()
    assert holds.hold("a", now + 0.2, lambda: ran.append("watch"))
    assert not holds.hold("b", now + 0.2, lambda: ran.append("b"))  # no such slot
    slot = downloader.slots["a"]
    assert slot.latercall is not None  # Scrapy's downloader waits while it is set
    holds.extend("a", now + 5)  # a Retry-After read meanwhile
    clock.advance(1)
    assert ran == [] and downloader.processed == []
    clock.advance(5)
    assert ran == ["watch"] and slot.latercall is None
    assert downloader.processed == [("spider", slot) if takes_spider else (slot,)]


def test_robots_txt_does_not_take_over_a_start_handed_out_early_before_its_time(server):
    """robots.txt may go in the stead of a popped request waiting for it (politeness.robots),
    but not before that request's start: one handed out early starts later than its pop."""
    queue = holding_queue(server)
    push(queue, "http://a/0", "http://a/1", "http://a/2")
    take(queue, LeaseBook(server, KEY, "w1", 30), 10)
    queue.started("a")
    got, _ = take_when_given(queue, LeaseBook(server, KEY, "w2", 30), time.monotonic() + 10)
    start_at = got[0].start_at
    assert start_at is not None
    early = queue.decode(got[0])
    due = slot_state(server, "a")[8]  # its start, on the server's clock (ms)
    wait = queue.take_start("a", "f" * 24, [queue.ids[early]])  # robots.txt of its worker
    assert wait is not None and wait > 0 and time.monotonic() < start_at
    while (wait := queue.take_start("a", "f" * 24, [queue.ids[early]])) != 0:
        assert time.monotonic() < start_at + 10
        time.sleep(min(wait or 0.02, 0.02))
    seconds, micros = server.time()
    assert seconds * 1000 + micros // 1000 >= due  # not before the start it took over
