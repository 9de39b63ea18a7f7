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
    # the popped request takes a start again (as robots.py asks: with its own id, held):
    # after robots.txt's, reported, and the delay
    assert queue.take_start("a", popped_id, [popped_id]) > 0
    queue.started("a", robots_id)  # robots.txt's bytes left
    deadline = time.monotonic() + 10
    while (wait := queue.take_start("a", popped_id, [popped_id])) != 0:
        assert time.monotonic() < deadline
        time.sleep(min(wait or 0.05, 0.05))
    assert slot_state(server, "a")[13] == popped_id
    assert slot_state(server, "a")[12] == 2  # two starts counted: its pop's, robots.txt's


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


# -- the worker's side: the gate before the downloader ----------------------------------


def run_now(coroutine) -> None:
    """Run a coroutine that must not wait (the slot allows the start at once)."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    coroutine.close()
    raise AssertionError("it waited")


def gate_of(queue):
    from scrapy_redis.politeness.outside import OutsideGate
    from scrapy_redis.politeness.pacing import PolitePacing
    from scrapy_redis.scheduling.pacing import Pacer

    class Downloader:  # Scrapy's, as PolitePacing reads it: no request running yet
        active: set = set()
        slots: dict = {}

        def get_slot_key(self, request):
            return queue.limits.slot_of(request)

    spider = queue.spider
    pacing = PolitePacing(Pacer(prefetch=8), spider.crawler, spider)
    pacing.downloader = Downloader()
    pacing.queues = [queue]
    queue.reports_starts = pacing.reports
    return OutsideGate(pacing, "w1", 30), pacing


def robots_request(host: str):
    from scrapy import Request

    return Request(f"http://{host}/robots.txt", meta={"dont_obey_robotstxt": True})


def test_a_robots_txt_no_popped_request_waits_for_leases_a_place_until_it_left(server):
    queue = make_queue(server, {"CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    gate, pacing = gate_of(queue)
    robots = robots_request("b.test")
    run_now(gate.process_request(robots))
    assert slot_state(server, "b.test")[1] == 1
    (record,) = server.hvals(f"{KEY}:leases")
    assert record.startswith(b"\x95\xa5place")  # msgpack ["place", ...]: nothing goes back
    assert pacing.handed_out(robots)  # its start is reported as a popped request's
    gate.left(robots)
    assert slot_state(server, "b.test")[1] == 0 and not server.exists(f"{KEY}:leases")


def test_a_robots_txt_goes_in_the_stead_of_the_popped_request_then_that_starts_again(server):
    queue = make_queue(server, DELAY)
    gate, pacing = gate_of(queue)
    push(queue, "http://a/1", "http://a/2")
    got, _ = take(queue, LeaseBook(server, KEY, "w1", 30), 1)
    popped = queue.decode(got[0])
    assert pacing.held_back(popped) is False  # handed out: it reaches RobotsTxtMiddleware
    robots = robots_request("a")
    run_now(gate.process_request(robots))  # at once, in the popped request's stead
    state = slot_state(server, "a")
    assert state[1] == 1 and state[13] not in ("", queue.ids[popped])  # no new place
    assert popped in gate.robots.again
    queue.started("a")  # robots.txt's bytes left: the next start after the delay
    deadline = time.monotonic() + 10
    while slot_state(server, "a")[0] > server_ms(server):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    run_now(gate.process_request(popped))  # RobotsTxtMiddleware let it go: a start again
    state = slot_state(server, "a")
    assert state[13] == queue.ids[popped] and state[1] == 1  # its start; still one place
    assert state[12] == 2 and popped not in gate.robots.again and pacing.handed_out(popped)


def server_ms(server) -> int:
    seconds, micros = server.time()
    return seconds * 1000 + micros // 1000


def test_a_popped_request_whose_start_nothing_used_goes_at_once(server):
    """Marked to start again (a robots.txt of its slot, of another host, was fetched
    meanwhile, with a place of its own), it still holds the slot's unreported start."""
    queue = make_queue(server, DELAY)
    gate, pacing = gate_of(queue)
    push(queue, "http://a/1", download_slot="shared")
    got, _ = take(queue, LeaseBook(server, KEY, "w1", 30), 1)
    popped = queue.decode(got[0])
    pacing.held_back(popped)
    gate.robots.again[popped] = "shared"
    run_now(gate.process_request(popped))
    assert slot_state(server, "shared")[13] == queue.ids[popped]


class CrawlDelayParser:  # a robots.txt parser, as Scrapy's robots_parsed signal gives it
    def __init__(self, delay: float) -> None:
        self.delay = delay

    def crawl_delay(self, agent: str) -> float:
        return self.delay


def test_a_request_handed_out_before_the_crawl_delay_was_known_waits_for_it(server):
    """Popped with no delay known, it waited for its worker's robots.txt; once that says
    Crawl-delay 0.5, it starts no sooner than 0.5 s after robots.txt, like every later
    start (a loaded CI run saw it go at once, and the next page 0.36 s after it)."""
    queue = make_queue(server, {})
    gate, pacing = gate_of(queue)
    push(queue, "http://a/1", "http://a/2")
    got, _ = take(queue, LeaseBook(server, KEY, "w1", 30), 1)
    popped = queue.decode(got[0])
    pacing.held_back(popped)  # handed out: it waits in RobotsTxtMiddleware
    robots = robots_request("a")
    run_now(gate.process_request(robots))  # no delay known: at once
    queue.started("a")
    parsed = server_ms(server)  # (before the Crawl-delay is recorded, on the server's clock)
    pacing.robots_parsed(CrawlDelayParser(0.5), robots)
    waiting = gate.process_request(popped)
    waiting.send(None)  # it waits (run_now would raise)
    waiting.close()
    deadline = time.monotonic() + 10
    while (wait := queue.take_start("a", queue.ids[popped])) != 0:
        assert time.monotonic() < deadline
        time.sleep(min(wait or 0.05, 0.05))
    assert server_ms(server) >= parsed + 500
