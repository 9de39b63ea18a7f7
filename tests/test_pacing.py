"""Pacing: a worker leases and hands out about what its downloader starts in the next second.

The Pacer is driven by a clock of the test's own (no sleeping); the scheduler-level
tests give it a stand-in engine whose downloader has the attributes the scheduler
reads (``slots``, ``get_slot_key()``, ``active``). test_balance_e2e.py runs the real
thing: two workers on a polite crawl.
"""

from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
from scrapy import Request
from scrapy.settings import Settings

from helpers import Calls, leased_entries
from scrapy_redis.scheduler import Scheduler
from scrapy_redis.scheduling.pacing import UNPACED_FIRST_BATCH, Pacer, slots_may_have_delays


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pops(pacer: Pacer, clock: Clock, handed: list[float], queued: int = 10**6) -> list[int]:
    """Sizes asked for when each batch is handed out over ``handed[i]`` seconds."""
    sizes = []
    for seconds in handed:
        size = pacer.size()
        sizes.append(size)
        pacer.popped(min(size, queued))
        clock.now += seconds
    return sizes


# -- the size of each pop ---------------------------------------------------------------


def test_the_first_pop_leases_one_and_bursts_double_up_to_the_prefetch():
    clock = Clock()
    pacer = Pacer(prefetch=100, clock=clock)
    assert pops(pacer, clock, [0.0] * 9) == [1, 2, 4, 8, 16, 32, 64, 100, 100]


def test_a_pop_leases_about_a_quarter_second_of_the_hand_out_rate():
    clock = Clock()
    pacer = Pacer(prefetch=128, clock=clock)
    # 1, 2 and 4 handed out in 0.125 s each (the rate of the last batch, at most
    # doubling), then 8 in 4 s (2 a second: 0.5 per quarter second, at least 1); then
    # one in 0.5 s; then faster again.
    sizes = pops(pacer, clock, [0.125, 0.125, 0.125, 4.0, 0.5, 0.0625, 0.125, 0.0])
    assert sizes == [1, 2, 4, 8, 1, 1, 2, 4]


def test_the_size_never_drops_below_one_and_an_empty_pop_keeps_it():
    clock = Clock()
    pacer = Pacer(prefetch=16, clock=clock)
    assert pops(pacer, clock, [0.0, 0.0, 3600.0]) == [1, 2, 4]
    assert pacer.size() == 1  # 4 in an hour
    pacer.popped(0)  # the queue was empty
    clock.now += 60
    assert pacer.size() == 1
    pacer.popped(1)
    assert pacer.size() == 2  # handed out at once


def test_a_prefetch_of_one_and_an_unpaced_first_pop():
    clock = Clock()
    assert pops(Pacer(prefetch=1, clock=clock), clock, [0.0] * 3) == [1, 1, 1]
    assert Pacer(prefetch=128, clock=clock).size(paced=False) == UNPACED_FIRST_BATCH
    assert Pacer(prefetch=4, clock=clock).size(paced=False) == 4


# -- holding requests back --------------------------------------------------------------


def test_a_slot_with_a_delay_gets_a_second_of_requests_ahead():
    clock = Clock()
    pacer = Pacer(prefetch=128, clock=clock)
    assert [pacer.hold_back("a.com", 1.0) for _ in range(3)] == [0.0, 0.0, 1.0]
    clock.now += 0.5
    assert pacer.hold_back("a.com", 1.0) == pytest.approx(0.5)
    clock.now += 0.5
    assert pacer.hold_back("a.com", 1.0) == 0.0  # its next start is a second away again
    assert pacer.hold_back("a.com", 1.0) == pytest.approx(1.0)
    # DOWNLOAD_DELAY = 0.25: the one starting now and the four of the next second.
    assert [pacer.hold_back("b.com", 0.25) for _ in range(6)] == [0.0] * 5 + [0.25]
    assert [pacer.hold_back("c.com", 0.0) for _ in range(50)] == [0.0] * 50  # no delay


def test_a_held_back_request_caps_the_next_pop_at_what_its_slot_starts():
    clock = Clock()
    pacer = Pacer(prefetch=128, clock=clock)
    assert pops(pacer, clock, [0.0] * 5) == [1, 2, 4, 8, 16]
    while not pacer.hold_back("a.com", 0.25):
        pass
    assert pacer.size() == 4  # not 32: the slot starts 4 a second
    pacer.popped(4)
    assert pacer.size() == 8  # nothing held back since


def test_requests_of_other_slots_handed_out_past_a_held_one_lift_the_cap():
    clock = Clock()
    pacer = Pacer(prefetch=128, clock=clock)
    assert pops(pacer, clock, [0.0] * 3) == [1, 2, 4]
    while not pacer.hold_back("a.com", 1.0):
        pass
    pacer.skipped(handed=True)  # a b.com request went out instead
    assert pacer.size() == 8


def test_an_idle_downloader_holds_nothing_back():
    """Responses that never reach a slot (HTTPCACHE) leave the downloader empty."""
    clock = Clock()
    pacer = Pacer(prefetch=128, clock=clock)
    assert [pacer.hold_back("a.com", 1.0) for _ in range(3)] == [0.0, 0.0, 1.0]
    assert pacer.hold_back("a.com", 1.0, idle=True) == 0.0


def test_slots_are_paced_apart_and_idle_ones_forgotten():
    clock = Clock()
    pacer = Pacer(prefetch=128, clock=clock)
    for n in range(3000):
        assert pacer.hold_back(f"site{n}.com", 1.0) == 0.0
        clock.now += 0.01
    assert pacer.tracked_slots() <= 1024


@pytest.mark.parametrize(
    ("settings", "paced"),
    [
        ({}, False),
        ({"DOWNLOAD_DELAY": 0.5}, True),
        ({"AUTOTHROTTLE_ENABLED": True}, True),
        ({"DOWNLOAD_SLOTS": {"a.com": {"concurrency": 2}}}, False),
        ({"DOWNLOAD_SLOTS": {"a.com": {"delay": 2}}}, True),
    ],
)
def test_only_settings_that_may_delay_a_slot_turn_pacing_on(settings, paced):
    assert slots_may_have_delays(Settings(settings)) is paced


# -- in the scheduler -----------------------------------------------------------------------


def engine_with_downloader(scheduler: Scheduler) -> SimpleNamespace:
    """What the scheduler reads of Scrapy's engine: its requests in progress and its
    downloader (one slot per host, as Scrapy's ``get_slot_key()``)."""
    downloader = SimpleNamespace(
        slots={}, active=set(), get_slot_key=lambda request: urlsplit(request.url).hostname
    )
    wakes: list[int] = []
    slot = SimpleNamespace(
        inprogress=set(), closing=None, nextcall=SimpleNamespace(schedule=lambda: wakes.append(1))
    )
    engine = SimpleNamespace(_slot=slot, running=True, downloader=downloader, wakes=wakes)
    engine.in_progress = slot.inprogress  # the test's handle on what Scrapy keeps private
    scheduler.crawler.engine = engine
    return engine


def clocked_scheduler(schedulers, settings: dict, clock: Clock) -> Scheduler:
    class ClockedScheduler(Scheduler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, clock=clock, **kwargs)

    return schedulers(settings, ClockedScheduler)


def test_a_polite_worker_leaves_the_rest_to_the_others(settings_dict, server, schedulers):
    """DOWNLOAD_DELAY = 1: the engine takes what the slot starts within a second (2), the
    next is held back without a round trip, and the queue keeps the rest."""
    clock = Clock()
    settings = {**settings_dict, "DOWNLOAD_DELAY": 1.0}
    polite = clocked_scheduler(schedulers, settings, clock)
    engine = engine_with_downloader(polite)
    for i in range(10):
        polite.enqueue_request(Request(f"http://example.com/{i}"))
    polite.send_enqueued()
    for _ in range(2):  # pops of 1 and 2; the engine's downloader takes each at once
        request = polite.next_request()
        engine.in_progress.add(request)
        engine.downloader.active.add(request)
    calls = Calls(server, "evalsha")
    assert polite.next_request() is None  # the third waits: the slot starts it in 2 s
    assert calls() == {"evalsha": 0}
    assert polite.has_pending_requests()
    assert leased_entries(server) == 3
    other = schedulers(settings)
    assert len([r for r in iter(other.next_request, None)]) == 7  # what is left is theirs
    calls()
    clock.now += 1.0
    assert polite.next_request().url == "http://example.com/2"  # held back, now handed out
    assert calls()["evalsha"] == 0


def test_without_a_delay_nothing_is_held_back(settings_dict, server, schedulers):
    scheduler = clocked_scheduler(schedulers, settings_dict, Clock())
    engine = engine_with_downloader(scheduler)
    for i in range(40):
        scheduler.enqueue_request(Request(f"http://example.com/{i}"))
    for _ in range(40):
        engine.downloader.active.add(scheduler.next_request())
    assert None not in engine.downloader.active


def test_a_held_back_request_does_not_block_other_sites(settings_dict, server, schedulers):
    """A request whose slot must wait is kept, in order, and the next one of another
    slot is handed out instead."""
    settings = {**settings_dict, "DOWNLOAD_DELAY": 1.0}
    scheduler = clocked_scheduler(schedulers, settings, Clock())
    engine = engine_with_downloader(scheduler)
    for path in ["a/0", "a/1", "b/0", "a/2", "a/3", "b/1", "b/2", "b/3"]:
        scheduler.enqueue_request(Request(f"http://{path.replace('/', '.com/')}"))
    taken = []
    while (request := scheduler.next_request()) is not None:
        engine.in_progress.add(request)
        engine.downloader.active.add(request)
        taken.append(request.url)
    # Two per site within a second; a/2 and a/3 (held back) did not stop b/1.
    assert taken == ["http://a.com/0", "http://a.com/1", "http://b.com/0", "http://b.com/1"]
    assert leased_entries(server) == 7  # pops of 1, 2 and 4
    assert len(scheduler) == 1 + 3  # b/3 in Redis; a/2, a/3, b/2 held back


def test_a_polite_worker_split_into_lanes_paces_the_host_once(settings_dict, server, schedulers):
    """SCHEDULER_SHARDS = 4: one host's requests are in every lane; the worker's pacing of
    the host is one, so it hands out what the slot starts within a second (2), not that
    much per lane."""
    clock = Clock()
    settings = {**settings_dict, "DOWNLOAD_DELAY": 1.0, "SCHEDULER_SHARDS": 4}
    polite = clocked_scheduler(schedulers, settings, clock)
    engine = engine_with_downloader(polite)
    for i in range(40):
        polite.enqueue_request(Request(f"http://example.com/{i}"))
    polite.send_enqueued()
    handed = []
    for _ in range(8):
        request = polite.next_request()
        if request is None:
            break
        handed.append(request)
        engine.in_progress.add(request)
        engine.downloader.active.add(request)
    assert len(handed) == 2  # the third waits: the slot starts it in 2 s
    clock.now += 1.0
    assert polite.next_request() is not None
