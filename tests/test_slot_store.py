"""How the per-slot queues store their requests (lua/_slot_store.lua): a slot's requests of
one priority in a list once there are a few, inline members of ``pq`` below that (and in
a crawl persisted before the lists: every request in ``pq``, converted as it goes on), on
a real redis-server."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from scrapy import Request

from helpers import make_spider
from scrapy_redis.fleet.operations import purge_queue
from scrapy_redis.politeness.queue import Member, SlotQueue, member_request, queued_members
from scrapy_redis.politeness.report import slot_views
from scrapy_redis.queue import PriorityQueue
from scrapy_redis.queues.leases import LeaseBook
from scrapy_redis.store.keys import slot_list_key, slot_queue_keys, slot_store_keys

KEY = "polite:requests"
FIXTURE = Path(__file__).with_name("fixtures") / "polite_v1.json"
NO_LIMITS = {"DOWNLOAD_DELAY": 0, "CONCURRENT_REQUESTS_PER_DOMAIN": 1000}


def make_queue(server, key: str = KEY) -> SlotQueue:
    return SlotQueue(server, make_spider(NO_LIMITS), key)


def push(queue, *urls: str, priority: int = 0) -> None:
    queue.push_entries([queue.encode(Request(u, priority=priority)) for u in urls])


def drain_urls(queue: SlotQueue, book: LeaseBook) -> list[str]:
    """Pop everything, 8 at a time, each pop releasing the previous lease (as a worker)."""
    got: list[str] = []
    held = None
    while True:
        releases = [(held, list(range(1, held.unreleased + 1)))] if held else []
        ticket = book.ticket(releases=releases)
        entries = queue.pop_entries(8, ticket=ticket)
        held = book.taken_batch(ticket, len(entries))
        if not entries:
            return got
        got += [queue.decode(entry).url for entry in entries]


def inline_count(server, slot: str) -> int:
    """The slot's inline members (not the groups pointing to lists)."""
    pq, low = slot_queue_keys(KEY)[0], slot.encode() + b"\0"
    found = server.zrangebylex(pq, b"[" + low, b"(" + slot.encode() + b"\1")
    return sum(len(member) != len(low) + 12 for member in found)


def listed(server) -> dict[bytes, int]:
    groups = server.zrange(slot_store_keys(KEY)[0], 0, -1)
    return {group: server.llen(slot_list_key(KEY, group)) for group in groups}


def consistent(queue: SlotQueue) -> int:
    """len(queue) (ZCARD pq + more) is what the queue holds; how many."""
    held = len(list(queued_members(queue.server, queue.key)))
    assert len(queue) == held
    return held


def polite_keys(server) -> list[bytes]:
    return sorted(key for key in server.keys("*") if b":writes:" not in key)


def test_a_slots_requests_of_one_priority_cost_about_what_a_priority_queues_do(server):
    urls = [f"http://site{n % 20:02d}.example/page/{n:06d}.html" for n in range(4000)]
    used = {}
    for kind in (SlotQueue, PriorityQueue):
        server.flushdb()
        queue = kind(server, make_spider(NO_LIMITS), KEY)
        for start in range(0, len(urls), 500):  # (as a crawl pushes: in batches)
            push(queue, *urls[start : start + 500])
        assert len(queue) == len(urls)
        # what the keys hold (used_memory moves with the clients' buffers and scripts)
        keys = [key for key in server.keys("*") if b":writes:" not in key]
        used[kind] = sum(server.memory_usage(key, samples=0) for key in keys) / len(urls)
    assert used[SlotQueue] < 1.5 * used[PriorityQueue], used  # (all in pq: about 4 times)


def test_a_small_group_stays_inline_and_a_bigger_one_becomes_a_list(server):
    queue = make_queue(server)
    push(queue, *(f"http://a/{n}" for n in range(3)))
    push(queue, "http://b/0", "http://b/1", priority=2)
    assert inline_count(server, "a") == 3 and inline_count(server, "b") == 2
    assert listed(server) == {} and len(queue) == 5
    push(queue, "http://a/3")  # the 4th of a's priority 0: the group moves to its list
    assert inline_count(server, "a") == 0
    assert list(listed(server).values()) == [4] and len(queue) == 6
    push(queue, *(f"http://a/{n}" for n in range(4, 10)))
    assert inline_count(server, "a") == 0 and list(listed(server).values()) == [10]
    assert consistent(queue) == 12
    assert [member_request(m) for m in queued_members(server, KEY)][:1]  # readable
    assert drain_urls(queue, LeaseBook(server, KEY, "w1", 30)) == [
        "http://b/0",
        "http://b/1",
        *(f"http://a/{n}" for n in range(10)),
    ]
    assert polite_keys(server) == sorted(
        k.encode() for k in [slot_queue_keys(KEY)[3], slot_queue_keys(KEY)[4]]
    )  # the lists, their index and count are gone with their requests (slots, seq stay)


def test_requests_put_back_go_to_their_place_once(server):
    queue = make_queue(server)
    push(queue, *(f"http://a/{n}" for n in range(10)))
    book = LeaseBook(server, KEY, "w1", 30)
    ticket = book.ticket()
    taken = queue.pop_entries(5, ticket=ticket)
    assert [queue.decode(e).url for e in taken] == [f"http://a/{n}" for n in range(5)]
    for n in (3, 1, 4, 0, 2, 0, 3):  # ahead of the list, or into it by sequence; twice
        queue.restore_entries([taken[n]])
    assert consistent(queue) == 10 and list(listed(server).values()) == [10]
    book.taken_batch(ticket, 0)
    assert drain_urls(queue, book) == [f"http://a/{n}" for n in range(10)]


def load_v1(server) -> dict:
    """The crawl of tests/fixtures/make_polite_v1.py, its lease expired."""
    data = json.loads(FIXTURE.read_text())
    for key, (kind, value) in data["keys"].items():
        if kind == "zset":
            score = key.endswith(":lease_deadlines")
            pairs = {base64.b64decode(m): 0 if score else s for m, s in value}
            server.zadd(key, pairs)
        elif kind == "hash":
            server.hset(
                key, mapping={base64.b64decode(f): base64.b64decode(v) for f, v in value.items()}
            )
        else:
            server.set(key, base64.b64decode(value))
    return data


def v1_order() -> list[str]:
    """The fixture's requests in their pop order: highest priority, then oldest."""
    data = json.loads(FIXTURE.read_text())
    requests = [
        (-priority, f"http://{slot}/{priority}/{n}")
        for slot, priority, count in data["groups"]
        for n in range(count)
    ]  # in push order: sorted() keeps it among equal priorities
    return [url for _, url in sorted(requests, key=lambda request: request[0])]


def test_a_crawl_queued_by_version_1_goes_on_and_moves_to_lists(server):
    data = load_v1(server)
    queue = make_queue(server)
    total = sum(count for _, _, count in data["groups"])
    assert len(queue) == total - data["leased"] and listed(server) == {}
    book = LeaseBook(server, KEY, "w1", 30)
    assert book.recover_expired().requeued == data["leased"]  # back in their places...
    assert len(queue) == total and list(listed(server).values()) == [256]  # ...a chunk moved
    assert inline_count(server, "a.test") == 303 - 256
    push(queue, "http://a.test/0/new")  # the next chunk of a.test's priority 0 moves
    assert list(listed(server).values()) == [301] and len(queue) == total + 1
    assert inline_count(server, "a.test") == 3  # priority 5's
    [view] = [v for v in slot_views(server, [KEY], False, 0) if v["slot"] == "a.test"]
    assert view["queued"] == 304 and consistent(queue) == total + 1
    expected = v1_order()
    expected.insert(expected.index("http://c.test/-3/0"), "http://a.test/0/new")
    exported = [queue.decode(Member.of(m)).url for m in queued_members(server, KEY)]
    assert exported == sorted(expected, key=_slot_first(expected))  # slot by slot
    # (the recovered ones are handed out one per pop: a delivery that may have killed
    # its worker is not given with others; see lease_requeue.lua)
    assert sorted(drain_urls(queue, book)) == sorted(expected)
    assert len(queue) == 0 and listed(server) == {}


def _slot_first(order: list[str]):
    """Sort key: slot by slot, each in ``order``."""
    return lambda url: (url.split("/")[2], order.index(url))


def test_a_version_1_group_moves_to_its_list_as_it_is_popped(server):
    data = load_v1(server)
    queue = make_queue(server)
    book = LeaseBook(server, KEY, "w2", 30)
    ticket = book.ticket()
    entries = queue.pop_entries(1, ticket=ticket)  # (a.test's priority 5 are leased)
    assert [queue.decode(e).url for e in entries] == ["http://a.test/0/1"]
    assert list(listed(server).values()) == [256]  # the next ones of its group moved
    assert consistent(queue) == sum(c for _, _, c in data["groups"]) - data["leased"] - 1
    book.taken_batch(ticket, len(entries))
    assert drain_urls(queue, book) == v1_order()[data["leased"] + 1 :]
    assert len(queue) == 0 and listed(server) == {}


def test_purge_flush_and_drain_take_the_lists_too(server):
    queue = make_queue(server)
    push(queue, *(f"http://a/{n}" for n in range(6)), "http://b/0")
    assert listed(server) and purge_queue(server, KEY) >= 6
    assert polite_keys(server) == []
    push(queue, *(f"http://a/{n}" for n in range(6)), "http://b/0")
    queue.clear()
    assert polite_keys(server) == []
    push(queue, *(f"http://a/{n}" for n in range(6)), "http://b/0")
    queue.drain = True
    ticket = LeaseBook(server, KEY, "w1", 30).ticket()
    assert len(queue.pop_entries(100, ticket=ticket)) == 7
    assert len(queue) == 0 and listed(server) == {} and queue.is_empty()


@pytest.mark.parametrize("count", [1, 4, 300])
def test_is_empty_and_len_count_inline_and_listed_requests(server, count):
    queue = make_queue(server)
    assert queue.is_empty() and len(queue) == 0
    push(queue, *(f"http://a/{n}" for n in range(count)))
    assert not queue.is_empty() and consistent(queue) == count


def test_the_list_threshold_is_the_scripts():
    from scrapy_redis.politeness.queue import LIST_FROM

    lua = Path(__file__).parent.parent / "src/scrapy_redis/store/lua/_slot_store.lua"
    assert f"local LIST_FROM = {LIST_FROM}\n" in lua.read_text()


def test_a_member_not_of_ours_put_back_stays_inline_and_breaks_nothing(server):
    queue = make_queue(server)
    push(queue, *(f"http://a/{n}" for n in range(6)))
    odd = b"a\0" + f"{(1 << 47) - 1:012x}".encode() + b"not-a-sequence"
    queue.restore_entries([Member.of(odd)])
    push(queue, "http://a/6")
    assert consistent(queue) == 8 and inline_count(server, "a") == 1
    ticket = LeaseBook(server, KEY, "w1", 30).ticket()
    taken = [entry.data for entry in queue.pop_entries(100, ticket=ticket)]
    assert len(taken) == 8 and odd in taken and len(queue) == 0


def test_lists_on_a_redis_cluster_stay_in_the_queues_slot(cluster):
    queue = make_queue(cluster)
    push(queue, *(f"http://a/{n}" for n in range(10)), "http://b/0")
    [group] = cluster.zrange(queue.store_keys[0], 0, -1)
    key = slot_list_key(queue.key, group, True)
    assert cluster.keyslot(key) == cluster.keyslot(queue.slot_keys[0]) and cluster.llen(key) == 10
    book = LeaseBook(cluster, queue.key, "w1", 30)
    ticket = book.ticket()
    taken = queue.pop_entries(3, ticket=ticket)
    queue.restore_entries(taken[1:])  # (given back out of order: into the list)
    book.taken_batch(ticket, len(taken))
    got = drain_urls(queue, book)
    assert sorted(got) == sorted([*(f"http://a/{n}" for n in range(1, 10)), "http://b/0"])
    assert [url for url in got if "/a/" in url] == [f"http://a/{n}" for n in range(1, 10)]
    assert len(queue) == 0 and queue.is_empty()


def test_requests_moved_from_another_queue_stay_ahead_of_newer_ones(server):
    source, target = make_queue(server, "source:requests"), make_queue(server)
    push(source, *(f"http://x/{n}" for n in range(50)))  # the source's sequence moves on
    push(source, *(f"http://a/{n}" for n in range(5)))
    source.drain = True
    ticket = LeaseBook(server, source.key, "mover", 30).ticket()
    moved = [e for e in source.pop_entries(100, ticket=ticket) if e.data[:2] == b"a\0"]
    target.push_entries(moved)  # members of the source: they keep their sequence (51-55)
    push(target, "http://b/new")  # a sequence after theirs (56), not 1: it comes after
    assert consistent(target) == 6
    taken = drain_urls(target, LeaseBook(server, KEY, "w1", 30))
    assert taken == [*(f"http://a/{n}" for n in range(5)), "http://b/new"]
