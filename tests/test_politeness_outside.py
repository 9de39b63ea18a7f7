"""The gate of the downloads outside the scheduler (politeness/outside.py) on a real
redis-server: a media pipeline's or ``engine.download_async()``'s request takes a start
and an in-flight place of its slot before it reaches the downloader."""

from __future__ import annotations

from types import SimpleNamespace

from scrapy import Request

from scrapy_redis.queues.leases import LeaseBook
from test_politeness import KEY, make_queue, push, slot_state, take
from test_politeness_robots import gate_of, run_now

ONE_AT_A_TIME = {"CONCURRENT_REQUESTS_PER_DOMAIN": 1}


def running_engine(queue, *in_progress: Request) -> set:
    """The crawler's engine as the gate reads it: the requests it works on."""
    working = set(in_progress)
    engine = SimpleNamespace(_slot=SimpleNamespace(inprogress=working), running=True)
    queue.spider.crawler.engine = engine
    return working


def popped_page(server, settings=ONE_AT_A_TIME):
    """A queue of slot a's limits, its gate and pacing, and its one page popped by this
    worker and handed out."""
    queue = make_queue(server, settings)
    gate, pacing = gate_of(queue)
    push(queue, "http://a/1")
    got, _ = take(queue, LeaseBook(server, KEY, "w1", 30), 1)
    page = queue.decode(got[0])
    pacing.held_back(page)
    return queue, gate, pacing, page


def test_a_download_of_a_slot_at_its_concurrency_waits_then_gives_its_place_back(server):
    queue = make_queue(server, ONE_AT_A_TIME)
    gate, pacing = gate_of(queue)
    push(queue, "http://a/1")
    other = LeaseBook(server, KEY, "w2", 30)
    _, lease = take(queue, other, 10)  # another worker's page holds a's one place
    assert slot_state(server, "a")[1] == 1
    file = Request("http://a/f/1.bin")
    waiting = gate.process_request(file)
    waiting.send(None)  # it waits (run_now would raise)
    waiting.close()
    assert slot_state(server, "a")[1] == 1 and not pacing.handed_out(file)
    other.ack([lease.id])  # the page is done: its place comes back
    assert slot_state(server, "a")[1] == 0
    run_now(gate.process_request(file))
    assert slot_state(server, "a")[1] == 1
    (record,) = server.hvals(f"{KEY}:leases")
    assert record.startswith(b"\x95\xa5place")  # a place under a lease of its own
    assert pacing.handed_out(file)  # its start is reported as a popped request's
    gate.left(file)  # it left the downloader
    assert slot_state(server, "a")[1] == 0 and not server.exists(f"{KEY}:leases")


def test_a_download_outside_the_scheduler_waits_for_the_slots_delay(server):
    queue = make_queue(server, {"DOWNLOAD_DELAY": 0.4, "RANDOMIZE_DOWNLOAD_DELAY": False})
    gate, _ = gate_of(queue)
    push(queue, "http://a/1")
    take(queue, LeaseBook(server, KEY, "w2", 30), 10)  # a start of a, now
    waiting = gate.process_request(Request("http://a/f/1.bin"))
    waiting.send(None)  # before the delay: it waits
    waiting.close()
    assert slot_state(server, "a")[1] == 1  # no place taken meanwhile


def test_a_file_uses_the_place_of_its_page_which_is_kept_until_the_file_left(server):
    """At its slot's concurrency, a download uses the place of a request this worker
    popped that left the downloader and that the engine still works on (a page waiting
    for its file in FilesPipeline): that request's lease is not released before the
    download has left."""
    queue, gate, pacing, page = popped_page(server)
    pacing.reached(page)
    page.meta["download_slot"] = "a"  # (the downloader sets it)
    working = running_engine(queue, page)
    gate.left(page)  # its response is in: the callback and the item pipelines run
    file = Request("http://a/f/1.bin")
    run_now(gate.process_request(file))  # at once: in the page's place
    assert slot_state(server, "a")[1] == 1 and server.hlen(f"{KEY}:leases") == 1  # the page's
    assert gate.lending() == {page} and pacing.lending() == {page}
    second = Request("http://a/f/2.bin")  # the page's place is lent: a second file waits
    waiting = gate.process_request(second)
    waiting.send(None)
    waiting.close()
    gate.left(file)
    run_now(gate.process_request(second))  # the page's place is free again: it lends it
    assert gate.lent[second] is page
    working.discard(page)  # the engine is done with the page, the second file is still out
    assert pacing.lending() == {page}  # so its lease (and place) stays
    gate.left(second)
    assert not pacing.lending()


def test_a_popped_request_done_lends_nothing(server):
    queue = make_queue(server, ONE_AT_A_TIME)
    gate, _ = gate_of(queue)
    push(queue, "http://a/1")
    got, _ = take(queue, LeaseBook(server, KEY, "w1", 30), 1)
    page = queue.decode(got[0])
    page.meta["download_slot"] = "a"
    running_engine(queue)  # the engine is done with it: its lease goes at the next pop
    gate.left(page)
    waiting = gate.process_request(Request("http://a/f/1.bin"))
    waiting.send(None)  # it waits for a place
    waiting.close()
    assert not gate.lending() and not gate.landed


def test_a_request_handed_out_by_the_scheduler_passes(server):
    _, gate, _, page = popped_page(server)
    run_now(gate.process_request(page))  # its pop counted its start and place
    assert slot_state(server, "a")[1] == 1 and not gate.places


def test_a_request_whose_place_is_lent_keeps_its_lease_until_the_download_left(
    settings_dict, server, schedulers
):
    """The scheduler's side: a handed-out request the engine is done with is released
    at the next pop, but not while the pacing says a download uses its place."""
    from helpers import leased_entries, stand_in_engine

    scheduler = schedulers({**settings_dict, "SCHEDULER_PREFETCH": 1})
    in_progress = stand_in_engine(scheduler)
    for n in range(3):
        scheduler.enqueue_request(Request(f"http://example.com/{n}"))
    page = scheduler.next_request()
    lending = {page}  # (PolitePacing.lending(): its gate's downloads, politeness/outside)
    scheduler._parts.feed.pacing.lending = lambda: lending
    assert not in_progress  # the engine is done with the page, its file is still out
    scheduler.next_request()
    assert leased_entries(server) == 2  # the page's lease is kept
    lending.clear()  # the file left the downloader
    scheduler.next_request()
    assert leased_entries(server) == 1  # released with the next pop


def test_a_download_outside_the_scheduler_lends_nothing_once_it_left(server):
    """A download outside the scheduler has an id of its own (its start's report names
    it) but was not popped: once it left, its place (its own lease, given back) is not
    lent to the next download, though the engine still holds it a moment."""
    queue = make_queue(server, ONE_AT_A_TIME)
    gate, _ = gate_of(queue)
    file = Request("http://a/f/1.bin")
    run_now(gate.process_request(file))
    assert file in queue.ids and slot_state(server, "a")[1] == 1
    file.meta["download_slot"] = "a"  # (the downloader sets it)
    running_engine(queue, file)  # (engine.download() requests are in progress too)
    gate.left(file)
    assert file not in gate.landed and slot_state(server, "a")[1] == 0
    second = Request("http://a/f/2.bin")
    run_now(gate.process_request(second))
    assert second not in gate.lent and second in gate.places  # a place of its own
    assert slot_state(server, "a")[1] == 1
