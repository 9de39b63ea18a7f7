"""A start of a download slot for a request downloaded without the queue (robots.txt,
politeness/robots.py): ``slot_take.lua`` on a real redis-server, on its clock."""

from __future__ import annotations

import time
import uuid

from helpers import expire_leases
from scrapy_redis.queues.leases import LeaseBook
from scrapy_redis.store.keys import deliveries_key
from test_politeness import KEY, make_queue, push, slot_state, take, urls

DELAY = {"DOWNLOAD_DELAY": 0.4, "RANDOMIZE_DOWNLOAD_DELAY": False}


def new_id() -> str:
    return uuid.uuid4().hex[:24]


def test_a_robots_place_counts_in_the_slots_concurrency_and_comes_back_at_ack(server):
    queue = make_queue(server, {"CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    book = LeaseBook(server, KEY, "w1~robots", 30)
    ticket = book.ticket()
    assert queue.take_start("a", new_id(), ticket=ticket) == 0
    (lease_id,) = book.taken(ticket, 1)
    assert slot_state(server, "a")[1] == 1
    assert queue.take_start("a", new_id(), ticket=book.ticket()) is None  # at its cap
    push(queue, "http://a/1")
    assert take(queue, LeaseBook(server, KEY, "w2", 30), 10)[0] == []  # robots.txt's place
    book.ack([lease_id])
    assert slot_state(server, "a")[1] == 0
    got, _ = take(queue, LeaseBook(server, KEY, "w2", 30), 10)
    assert urls(queue, got) == ["http://a/1"]


def test_a_worker_killed_holding_a_robots_place_gives_it_back_at_recovery(server):
    queue = make_queue(server, {"CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    dead = LeaseBook(server, KEY, "dead~robots", 30)
    ticket = dead.ticket()
    assert queue.take_start("a", new_id(), ticket=ticket) == 0
    dead.taken(ticket, 1)  # then the worker dies: its lease is never renewed
    push(queue, "http://a/1")
    live = LeaseBook(server, KEY, "live", 30)
    assert take(queue, live, 10)[0] == []  # the dead worker holds a's place
    assert expire_leases(server) == 1
    recovery = live.recover_expired()
    assert (recovery.requeued, recovery.dead_lettered) == (0, 0)  # nothing goes back
    assert slot_state(server, "a")[1] == 0
    assert len(queue) == 1 and not server.exists(deliveries_key(KEY))
    got, _ = take(queue, live, 10)
    assert urls(queue, got) == ["http://a/1"]


def test_robots_txt_goes_in_the_stead_of_the_popped_request_waiting_for_it(server):
    queue = make_queue(server, DELAY)
    queue.reports_starts = True
    push(queue, "http://a/1", "http://a/2")
    got, _ = take(queue, LeaseBook(server, KEY, "w1", 30), 10)
    request = queue.decode(got[0])
    popped_id = queue.ids[request]
    robots_id = new_id()
    # the slot waits for the report of the popped request's start: robots.txt goes now
    assert queue.take_start("a", new_id()) > 0  # (a request that does not wait for it)
    assert queue.take_start("a", robots_id, [popped_id]) == 0
    assert slot_state(server, "a")[13] == robots_id
    assert slot_state(server, "a")[1] == 1  # no other place taken
    # the popped request takes a start again: after robots.txt's, reported, and the delay
    assert queue.take_start("a", popped_id) > 0
    queue.started("a")  # robots.txt's bytes left
    deadline = time.monotonic() + 10
    while (wait := queue.take_start("a", popped_id)) != 0:
        assert time.monotonic() < deadline
        time.sleep(min(wait or 0.05, 0.05))
    assert slot_state(server, "a")[13] == popped_id
    assert slot_state(server, "a")[12] == 2  # two starts counted: robots.txt's and its own


def test_a_start_for_robots_txt_waits_for_the_slots_delay(server):
    queue = make_queue(server, DELAY)
    push(queue, "http://a/1")
    take(queue, LeaseBook(server, KEY, "w1", 30), 10)
    started = time.monotonic()
    wait = queue.take_start("a", new_id(), ticket=LeaseBook(server, KEY, "w2", 30).ticket())
    assert wait is not None and 0.2 < wait <= 0.4
    deadline = started + 10
    while queue.take_start("a", new_id(), ticket=LeaseBook(server, KEY, "w2", 30).ticket()):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert time.monotonic() - started >= 0.35
