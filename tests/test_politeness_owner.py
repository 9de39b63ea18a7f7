"""Whose start a report clears (politeness, ``slot_started.lua``), and how a start lost
and taken again is counted (``slot_take.lua``): the scripts on a real redis-server, on
its clock (waits are polled with deadlines, never slept)."""

from __future__ import annotations

import time

from scrapy_redis.queues.leases import LeaseBook
from test_politeness import KEY, make_queue, push, slot_state, take, urls
from test_politeness_early import take_when_given
from test_politeness_robots import gate_of, robots_request, run_now

SETTINGS = {"DOWNLOAD_DELAY": 0.2, "RANDOMIZE_DOWNLOAD_DELAY": False}


def reporting(server):
    """A worker's queue that reports the starts of slots with a delay."""
    queue = make_queue(server, SETTINGS)
    queue.reports_starts = True
    return queue


def lost_start(queue):
    """Worker w1 pops a/0 and does not report its start; once the slot stops waiting for
    that report (the delay plus REPORT_GRACE), w2 pops a/1: the two requests."""
    push(queue, "http://a/0", "http://a/1", "http://a/2", "http://a/3")
    got, _ = take(queue, LeaseBook(queue.server, KEY, "w1", 30), 1)
    first = queue.decode(got[0])
    got, _ = take_when_given(queue, LeaseBook(queue.server, KEY, "w2", 30), time.monotonic() + 15)
    assert urls(queue, got) == ["http://a/1"]
    return first, queue.decode(got[0])


def test_a_report_of_another_requests_start_keeps_the_wait_for_the_owners(server):
    """a/0's report, after a/1 was popped, must not end the slot's wait for a/1's: else
    the next start came a delay after a/0's report, and a/1's worker slow to send brought
    two requests to the site closer than the delay."""
    queue = reporting(server)
    first, second = lost_start(queue)
    first_id, second_id = queue.ids[first], queue.ids[second]
    assert slot_state(server, "a")[13] == second_id
    # a real start now: the next one no sooner than a delay after it
    assert 0.19 <= queue.started("a", first_id) <= 0.2
    state = slot_state(server, "a")
    assert state[13] == second_id and state[8] > 0  # a/1's start: still unreported
    reported = time.monotonic()
    book = LeaseBook(server, KEY, "w3", 30)
    while time.monotonic() < reported + 0.6:  # past the delay: still waits for a/1's report
        assert take(queue, book, 10)[0] == []
        time.sleep(0.02)
    assert 0.19 <= queue.started("a", second_id) <= 0.2  # a/1's: the next a delay after it
    assert slot_state(server, "a")[13] == ""
    got, _ = take_when_given(queue, book, time.monotonic() + 10)
    assert urls(queue, got) == ["http://a/2"]


def test_a_report_without_an_id_clears_the_unreported_start_as_before(server):
    queue = reporting(server)
    lost_start(queue)
    assert 0.19 <= queue.started("a") <= 0.2  # (an older caller: whoever's it is)
    state = slot_state(server, "a")
    assert state[13] == "" and state[8] == 0


def test_the_worker_reports_a_start_under_its_requests_id(server):
    """The first request of a slot in a worker reports its start when it leaves the
    downloader: after its response, which a slow site sends after the slot stopped
    waiting for that report; another worker popped meanwhile."""
    queue = reporting(server)
    _, pacing = gate_of(queue)
    push(queue, "http://a/0", "http://a/1", "http://a/2")
    got, _ = take(queue, LeaseBook(server, KEY, "w1", 30), 1)
    first = queue.decode(got[0])
    assert pacing.held_back(first) is False
    pacing.reached(first)  # its worker's first of the slot: reported when it leaves
    got, _ = take_when_given(queue, LeaseBook(server, KEY, "w2", 30), time.monotonic() + 15)
    second = queue.decode(got[0])
    pacing.left(first)  # its response came
    state = slot_state(server, "a")
    assert state[13] == queue.ids[second] and state[8] > 0


def test_a_robots_txt_reports_its_start_under_the_id_it_took_it_with(server):
    queue = reporting(server)
    gate, pacing = gate_of(queue)
    robots = robots_request("a")
    run_now(gate.process_request(robots))
    assert slot_state(server, "a")[13] == queue.ids[robots]
    pacing.reached(robots)  # the first of its slot here: reported when it leaves
    pacing.left(robots)
    assert slot_state(server, "a")[13] == ""


def test_a_start_lost_then_taken_again_is_counted_once(server):
    """a/0's start was lost (its worker stalled past the grace, it was never sent); its
    late check takes a new one: the site sees a/0 once, so the slot counts its starts
    (and its rate) once for it."""
    queue = reporting(server)
    first, second = lost_start(queue)
    queue.started("a", queue.ids[second])
    first_id = queue.ids[first]
    deadline = time.monotonic() + 10
    while (wait := queue.take_start("a", first_id, [first_id])) != 0:  # as late.py asks
        assert time.monotonic() < deadline
        time.sleep(min(wait or 0.02, 0.02))
    state = slot_state(server, "a")
    assert state[13] == first_id
    assert state[12] == 2  # a/0 and a/1, one start each
    assert state[15] + state[16] == 2  # this minute's and the one before's (rate)


def test_a_robots_txt_in_the_stead_of_a_popped_request_counts_its_start(server):
    """robots.txt goes with the popped request's start (counted at its pop), which then
    takes one again (not counted again): two requests, two starts."""
    queue = reporting(server)
    push(queue, "http://a/0", "http://a/1")
    got, _ = take(queue, LeaseBook(server, KEY, "w1", 30), 1)
    popped_id = queue.ids[queue.decode(got[0])]
    assert queue.take_start("a", "f" * 24, [popped_id]) == 0
    assert slot_state(server, "a")[12] == 2
    queue.started("a", "f" * 24)
    deadline = time.monotonic() + 10
    while (wait := queue.take_start("a", popped_id, [popped_id])) != 0:
        assert time.monotonic() < deadline
        time.sleep(min(wait or 0.02, 0.02))
    assert slot_state(server, "a")[12] == 2
