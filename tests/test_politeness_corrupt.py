"""Bad values planted in the per-slot queues' keys (``<queue key>:polite:*``, see
lua/_slots.lua "Bad values") never wedge the fleet: the scripts replace them, hand an
element that cannot be a request to the worker as an undecodable entry, keep every
neighbour, and the next pop reports them (a warning once per kind, a stat). On a real
redis-server."""

from __future__ import annotations

import logging
import math
import time

import msgpack
import pytest
from scrapy import Request

from helpers import open_scheduler
from scrapy_redis.politeness.corrupt import STAT
from scrapy_redis.queues.leases import LeaseBook
from scrapy_redis.store.keys import slot_queue_keys, slot_store_keys
from test_politeness import KEY, make_queue, push, slot_state, take, urls

BASE = "demo:requests:polite:"
URLS = sorted(f"http://{site}.example/{n}" for site in "ab" for n in range(6))


def crawl_with(redis_server, server, plant, settings=None, expect=None):
    """A scheduler with 6 requests of a.example and 6 of b.example queued per slot, the
    bad value planted, then popped until none comes: the URLs, the scheduler."""
    sched = open_scheduler(
        {
            "REDIS_URL": redis_server.url,
            "SCHEDULER_FLEET_LIMITS": True,
            "DOWNLOAD_DELAY": 0,
            "SCHEDULER_ENQUEUE_DELAY": 0,
            **(settings or {}),
        }
    )
    for url in URLS:
        sched.enqueue_request(Request(url))
    sched.send_enqueued()
    plant(server)
    got: list[str] = []
    deadline = time.monotonic() + 30
    expect = len(URLS) if expect is None else expect
    while len(got) < expect and time.monotonic() < deadline:
        request = sched.next_request()  # (raised ResponseError: every pop failed)
        if request is not None:
            got.append(request.url)
        elif not sched.has_pending_requests():  # (a worker stopped: nothing pending)
            break
    return sorted(got), sched


def stat(sched, kind: str) -> int:
    return sched.crawler.stats.get_value(f"{STAT}/{kind}", 0)


def bad_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("Bad value")]


# -- the three defects found -----------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [b"\xc1garbage", msgpack.packb([1, 2, 3])],  # not msgpack; a short array
    ids=["bad-bytes", "short-array"],
)
def test_a_corrupt_slot_state_is_replaced_and_every_request_still_comes(
    redis_server, server, caplog, raw
):
    def plant(r):
        r.hset(BASE + "slots", "a.example", raw)

    with caplog.at_level(logging.WARNING):
        got, sched = crawl_with(redis_server, server, plant)
    assert got == URLS
    assert stat(sched, "state") == 1
    assert sched.crawler.stats.get_value(STAT) >= 1
    (warning,) = [w for w in bad_warnings(caplog) if "polite:slots" in w]
    assert f"in {BASE}slots" in warning and "fresh state" in warning
    state = msgpack.unpackb(server.hget(BASE + "slots", "a.example"))
    assert len(state) == FIELDS and state[1] >= 0  # a state again
    sched.close("finished")


def test_a_short_list_element_is_set_aside_and_its_neighbours_come(redis_server, server, caplog):
    def plant(r):
        for key in r.keys(BASE + "q:*"):  # (a.example's and b.example's lists)
            r.lpush(key, b"x")

    with caplog.at_level(logging.WARNING):
        got, sched = crawl_with(redis_server, server, plant)
    assert got == URLS
    deadline = time.monotonic() + 10
    while server.llen("demo:requests:invalid") < 2 and time.monotonic() < deadline:
        sched.next_request()
    assert server.lrange("demo:requests:invalid", 0, -1) == [b"x", b"x"]
    assert stat(sched, "element") == 2
    assert any(f"in {BASE}q:*" in w for w in bad_warnings(caplog))
    sched.close("finished")
    assert len(sched.queue) == 0


def test_a_garbage_seq_restarts_and_the_push_at_close_works(redis_server, server):
    def plant(r):
        r.set(BASE + "seq", "abc")

    settings = {"REDIS_URL": redis_server.url, "SCHEDULER_PERSIST": True}
    sched = open_scheduler({**settings, "SCHEDULER_FLEET_LIMITS": True, "DOWNLOAD_DELAY": 0})
    for url in URLS:
        sched.enqueue_request(Request(url))
    sched.send_enqueued()
    first = sched.next_request()
    plant(server)
    sched.close("finished")  # puts back what it leased and holds (raised: compare nil)
    assert len(sched.queue) == len(URLS)  # nothing lost
    assert int(server.get(BASE + "seq")) > 1.7e12  # restarted from the server's clock (ms)
    assert server.hget(BASE + "corrupt", "seq") == b"1"  # for the next pop to report
    assert first is not None


# -- other values an attacker could plant ----------------------------------------------


@pytest.mark.parametrize(
    "seq",
    [b"abc", b"-5", b"1e3", str(2**48).encode(), b" 7", None],
    ids=["letters", "negative", "float", "too-large", "space", "a-list"],
)
def test_new_requests_are_queued_whatever_the_seq_holds(server, seq):
    queue = make_queue(server)
    seq_key = slot_queue_keys(KEY)[4]
    push(queue, "http://a/1")
    if seq is None:
        server.delete(seq_key)
        server.rpush(seq_key, "x")  # a key of another type
    else:
        server.set(seq_key, seq)
    push(queue, "http://a/2", "http://b/1")
    entries, _ = take(queue, LeaseBook(server, KEY, "w1", 30))
    assert sorted(urls(queue, entries)) == ["http://a/1", "http://a/2", "http://b/1"]
    assert 0 < int(server.get(seq_key)) < 2**47


def test_waiting_members_of_no_waiting_slot_do_not_hold_up_the_real_ones(server, caplog):
    queue = make_queue(server, {"DOWNLOAD_DELAY": 0.2, "RANDOMIZE_DOWNLOAD_DELAY": False})
    push(queue, "http://a/1", "http://a/2")
    book = LeaseBook(server, KEY, "w1", 30)
    first, _ = take(queue, book)
    assert urls(queue, first) == ["http://a/1"]  # a waits 0.2 s now
    waiting = slot_queue_keys(KEY)[2]
    server.zadd(waiting, {f"nosuchslot{n}": 0 for n in range(500)})  # due, ahead of a
    got: list[str] = []
    deadline = time.monotonic() + 10
    with caplog.at_level(logging.WARNING):
        while not got and time.monotonic() < deadline:
            entries, _ = take(queue, book)
            got = urls(queue, entries)
    assert got == ["http://a/2"]
    assert server.zcard(waiting) == 0
    assert server.hlen(slot_queue_keys(KEY)[3]) == 1  # no state made for them
    assert sum("polite:waiting" in w for w in bad_warnings(caplog)) == 1


def test_ready_members_of_no_ready_slot_do_not_hold_up_the_real_ones(server):
    queue = make_queue(server)
    push(queue, "http://a/1", "http://b/1")
    ready = slot_queue_keys(KEY)[1]
    # sort before every real member (priority 2^47 - 1, sequence 0), more than a pop removes
    server.zadd(ready, {b"0" * 24 + b"stray%d" % n: 0 for n in range(2500)})
    server.zadd(ready, {b"short": 0, b"0" * 24 + b"a": 0})  # no slot; a's, not its member
    book = LeaseBook(server, KEY, "w1", 30)
    got: list[str] = []
    for _ in range(10):  # (a pop removes 1000 at most, and says to ask again now)
        entries, _ = take(queue, book)
        got += urls(queue, entries)
        if len(got) == 2:
            break
        assert queue.next_start_in == 0
    assert sorted(got) == ["http://a/1", "http://b/1"]
    assert server.zcard(ready) == 0


NAN, INF = float("nan"), float("inf")
FRESH = [0, 0, 0, 0, 0, "r", "", 0, 0, 0, 0, 0, 0, "", 0, 0, 0, 0]
#: The fields of a slot state (see lua/_slots.lua).
FIELDS = len(FRESH)


def state_with(index: int, value) -> bytes:
    state = list(FRESH)
    state[index] = value
    return msgpack.packb(state)


@pytest.mark.parametrize(
    "raw",
    [
        state_with(0, NAN),  # next start
        state_with(2, INF),  # delay
        state_with(1, -3),  # in flight
        state_with(3, -1),  # concurrency
        state_with(0, "5"),  # a number as text
        state_with(9, True),  # Retry-After until
        state_with(13, 5),  # the unreported request's id
        msgpack.packb(FRESH[:6]),  # a field too few
        state_with(5, "x"),  # place
        state_with(6, 7),  # ready member
        msgpack.packb([*FRESH, 0]),  # a field too many
        msgpack.packb({"a": 1}),
        msgpack.packb("text"),
        b"",
        b"\x93\x01\x02\x03" * 100_000,  # large, and more than one value
    ],
)
def test_a_slot_state_of_another_shape_is_replaced(server, raw):
    queue = make_queue(server)
    push(queue, "http://a/1", "http://a/2", "http://b/1")
    server.hset(slot_queue_keys(KEY)[3], "a", raw)
    got: list[str] = []
    book = LeaseBook(server, KEY, "w1", 30)
    for _ in range(5):
        entries, _ = take(queue, book)
        got += urls(queue, entries)
    assert sorted(got) == ["http://a/1", "http://a/2", "http://b/1"]
    state = slot_state(server, "a")
    assert len(state) == FIELDS and all(not isinstance(v, float) or math.isfinite(v) for v in state)


def test_in_flight_restarts_at_zero_and_never_goes_negative(server):
    queue = make_queue(server, {"CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    push(queue, "http://a/1", "http://a/2", "http://a/3")
    book = LeaseBook(server, KEY, "w1", 30)
    entries, lease = take(queue, book)
    assert urls(queue, entries) == ["http://a/1"] and slot_state(server, "a")[1] == 1
    server.hset(slot_queue_keys(KEY)[3], "a", b"\xc1")
    book.ack([lease.id])  # its download ends: the fresh state's 0 stays 0
    assert slot_state(server, "a")[1] == 0
    entries, lease = take(queue, book)  # and the slot is placed again: a/2 comes
    assert urls(queue, entries) == ["http://a/2"] and slot_state(server, "a")[1] == 1


def test_feedback_and_start_reports_tolerate_a_corrupt_state(server):
    queue = make_queue(server, {"DOWNLOAD_DELAY": 0.05})
    push(queue, "http://a/1", "http://a/2")
    slots = slot_queue_keys(KEY)[3]
    for call in (
        lambda: queue.started("a"),
        lambda: queue.retry_after("a", 0.05),
        lambda: queue.crawl_delay("a", 0.05),
        lambda: queue.take_start("a", "0" * 24),
    ):
        server.hset(slots, "a", b"\xc1")
        call()
        assert len(slot_state(server, "a")) == FIELDS
    got: list[str] = []
    book = LeaseBook(server, KEY, "w1", 30)
    deadline = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        entries, _ = take(queue, book)
        got += urls(queue, entries)
    assert sorted(got) == ["http://a/1", "http://a/2"]


def test_the_count_of_bad_values_is_flushed_with_the_queue(server):
    queue = make_queue(server)
    push(queue, "http://a/1")
    server.set(slot_queue_keys(KEY)[4], "abc")
    push(queue, "http://a/2")
    corrupt = slot_store_keys(KEY)[2]
    assert server.hget(corrupt, "seq") == b"1"
    assert corrupt in queue.flush_keys()


def test_a_replaced_state_gets_its_limits_again_from_the_worker_told(server):
    settings = {"CONCURRENT_REQUESTS_PER_DOMAIN": 3, "DOWNLOAD_DELAY": 0.3}
    queue = make_queue(server, {**settings, "RANDOMIZE_DOWNLOAD_DELAY": False})
    push(queue, "http://a/1", "http://a/2")
    assert slot_state(server, "a")[2:4] == [300, 3]
    server.hset(slot_queue_keys(KEY)[3], "a", b"\xc1")
    take(queue, LeaseBook(server, KEY, "w1", 30))  # finds it, reports it: limits again
    assert slot_state(server, "a")[2:4] == [300, 3]
    assert not server.exists(slot_store_keys(KEY)[2])  # reported
    assert queue.corrupt.stats is not None
    assert queue.corrupt.stats.get_value(f"{STAT}/state") == 1


@pytest.mark.parametrize("value", [b"abc", b"-99999"])
def test_a_count_of_the_lists_that_is_not_one_restarts(redis_server, server, value):
    def plant(r):
        r.set(BASE + "more", value)

    got, sched = crawl_with(redis_server, server, plant)
    assert got == URLS  # (a pop taking from a list failed: every pop)
    assert len(sched.queue) == 0
    assert not server.exists(BASE + "more")
    sched.close("finished")


def test_a_count_of_bad_values_that_is_not_a_hash_is_replaced(redis_server, server):
    """(And a seq of another type, read by the duplicate filter's push: replaced.)"""

    def plant(r):
        r.set(BASE + "corrupt", "x")
        r.hset(BASE + "slots", "a.example", b"\xc1")
        r.delete(BASE + "seq")
        r.sadd(BASE + "seq", "x")

    got, sched = crawl_with(redis_server, server, plant)
    assert got == URLS
    assert stat(sched, "state") == 1 and stat(sched, "corrupt") == 1
    sched.enqueue_request(Request("http://c.example/"))
    sched.send_enqueued()
    assert sched.next_request().url == "http://c.example/"
    assert stat(sched, "seq") == 1
    sched.close("finished")


@pytest.mark.parametrize("name", ["slots", "ready", "waiting", "pq", "lists"])
def test_a_polite_key_of_another_type_stops_the_worker_naming_it(
    redis_server, server, caplog, name
):
    def plant(r):
        r.delete(BASE + name)
        r.sadd(BASE + name, "x")

    with caplog.at_level(logging.ERROR):
        got, sched = crawl_with(redis_server, server, plant, {"SCHEDULER_PERSIST": True})
    assert got == [] and not sched.has_pending_requests()  # stopped, the queue kept
    assert server.exists(BASE + "pq")
    assert f"Redis key '{BASE}{name}' holds a set" in caplog.text


def test_members_no_pop_reaches_are_swept_and_the_crawl_ends(redis_server, server):
    def plant(r):
        r.zadd(BASE + "pq", {b"garbage-member": 0, b"zz\0" + b"0" * 24 + b"orphan": 0})

    got, sched = crawl_with(redis_server, server, plant)
    assert got == URLS
    deadline = time.monotonic() + 10  # (the first pop that finds nothing sweeps)
    while sched.has_pending_requests() and time.monotonic() < deadline:
        sched.next_request()
    assert not sched.has_pending_requests() and len(sched.queue) == 0
    invalid = server.lrange("demo:requests:invalid", 0, -1)
    assert sorted(invalid) == [b"garbage-member", b"orphan"]  # set aside, not dropped
    assert stat(sched, "member") == 1 and stat(sched, "unplaced") == 1
    sched.close("finished")


def test_a_sweep_of_sound_queues_changes_nothing(server):
    queue = make_queue(server, {"CONCURRENT_REQUESTS_PER_DOMAIN": 1, "DOWNLOAD_DELAY": 30})
    push(queue, "http://a/1", "http://a/2", "http://b/1", "http://b/2", "http://c/1")
    push(queue, *(f"http://d/{n}" for n in range(6)))  # (a list)
    book = LeaseBook(server, KEY, "w1", 30)
    taken, _ = take(queue, book)  # a, b, c, d: each waits 30 s now, at its cap
    assert len(taken) == 4
    before = {key: server.dump(key) for key in server.keys("*")}
    queue.sweeper.chunk = 2  # (a chunk at a time, resumed)
    for _ in range(10):
        assert not queue.sweeper.sweep()
        if queue.sweeper.cursor == b"-":
            break
    assert queue.sweeper.cursor == b"-"
    assert {key: server.dump(key) for key in server.keys("*")} == before


def test_status_shows_a_slot_whose_state_holds_nan_or_infinity(server):
    from scrapy_redis.politeness.report import slot_views

    queue = make_queue(server)
    push(queue, "http://a/1")
    server.hset(slot_queue_keys(KEY)[3], "a", state_with(1, NAN))
    server.hset(slot_queue_keys(KEY)[3], "b", state_with(0, -INF))
    views = slot_views(server, [KEY], False, time.time())  # (raised: NaN to integer)
    assert {view["slot"]: view["in_flight"] for view in views} == {"a": 0, "b": 0}


def test_a_group_whose_list_is_missing_loses_only_that_list(redis_server, server):
    def plant(r):
        r.delete(*r.keys(BASE + "q:a.example*"))  # (its 6 requests: lost before the pop)

    got, sched = crawl_with(redis_server, server, plant, expect=6)
    assert got == [url for url in URLS if "b.example" in url]  # b's all come
    deadline = time.monotonic() + 10
    while sched.has_pending_requests() and time.monotonic() < deadline:
        sched.next_request()
    assert len(sched.queue) == 0  # its pointer, handed out, set aside as undecodable
    assert server.lrange("demo:requests:invalid", 0, -1) == [b""]
    assert stat(sched, "list") == 1 and not server.exists(BASE + "more")  # (5 counted)
    sched.close("finished")


def test_a_list_whose_pointer_is_gone_gets_it_back(redis_server, server):
    def plant(r):
        for group in r.zrange(BASE + "lists", 0, -1):
            if group.startswith(b"a.example"):
                r.zrem(BASE + "pq", group)  # its 6 requests: out of every pop's reach

    got, sched = crawl_with(redis_server, server, plant, expect=6)
    deadline = time.monotonic() + 10
    while sched.has_pending_requests() and time.monotonic() < deadline:
        request = sched.next_request()
        if request is not None:
            got.append(request.url)
    assert sorted(got) == URLS  # the sweep gave the list its pointer back
    assert stat(sched, "unlisted") == 1
    sched.close("finished")
