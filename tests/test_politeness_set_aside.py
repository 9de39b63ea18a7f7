"""The dead letters and undecodable entries of a crawl queued per download slot
(SCHEDULER_FLEET_LIMITS) hold requests, as the other queues' do: listed, exported and
put back by the commands as a user runs them (``scrapy redis`` in a project directory)."""

from __future__ import annotations

from scrapy import Request

from helpers import expire_leases, make_spider
from scrapy_redis.deadletters import dead_letters
from scrapy_redis.politeness.queue import SlotQueue
from scrapy_redis.queues.base import Entry
from scrapy_redis.queues.leases import LeaseBook
from scrapy_redis.serializers import msgpack_serializer
from scrapy_redis.store.keys import slot_queue_keys
from test_commands import project  # noqa: F401  (a fixture)

KEY = "demo:requests"


def polite_queue(server) -> SlotQueue:
    return SlotQueue(server, make_spider({"DOWNLOAD_DELAY": 0}), KEY)


def take(queue: SlotQueue, book: LeaseBook):
    ticket = book.ticket()
    entries = queue.pop_entries(10, ticket=ticket)
    return entries, book.taken_batch(ticket, len(entries))


def test_a_polite_dead_letter_is_a_request_and_goes_back_to_its_place(project, server):  # noqa: F811
    queue = polite_queue(server)
    queue.push_entries([queue.encode(Request("http://a.test/1", priority=3))])
    pq = slot_queue_keys(KEY)[0]
    member = server.zrange(pq, 0, -1)
    take(queue, LeaseBook(server, KEY, "w1", 30, max_deliveries=1))  # then the worker dies
    assert expire_leases(server) == 1
    assert LeaseBook(server, KEY, "w2", 30, max_deliveries=1).recover_expired().dead_lettered == 1

    (letter,) = dead_letters(server, KEY)
    assert letter.request_dict()["url"] == "http://a.test/1"
    assert (letter.priority, letter.slot, letter.key) == (3, "a.test", pq)
    assert project.json("status", "demo")["spiders"][0]["dead_letters"] == 1

    result = project.run("requeue", "demo", "--dead")
    assert result.returncode == 0, result.stderr
    assert "Dead letters put back: 1" in result.stdout
    assert server.zrange(pq, 0, -1) == member  # its member again: its place in its slot
    entries, _ = take(queue, LeaseBook(server, KEY, "w3", 30))
    assert [queue.decode(entry).url for entry in entries] == ["http://a.test/1"]


def test_a_dead_letter_written_as_the_member_is_listed_as_its_request(server):
    """Dead letters written before they held the request: the member, read as its parts."""
    import msgpack

    data = msgpack_serializer.dumps({"url": "http://a.test/2", "priority": 5, "meta": {}})
    member = b"a.test\0" + b"%012x%012x" % (2**47 - 1 - 5, 9) + data
    pq = slot_queue_keys(KEY)[0]
    server.rpush(f"{KEY}:dead", msgpack.packb(["slot", pq, "", "", member]))
    (letter,) = dead_letters(server, KEY)
    assert (letter.data, letter.priority, letter.slot) == (data, 5, "a.test")


def test_a_polite_entry_set_aside_is_exported_and_requeued_as_a_request(project, server):  # noqa: F811
    queue = polite_queue(server)
    # a request this worker cannot decode (its spider has no parse_item), the project's can
    data = msgpack_serializer.dumps(
        {"url": "http://a.test/", "priority": 7, "callback": "parse_item", "meta": {}}
    )
    entry = Entry(data, 7)
    entry.slot = "a.test"
    queue.push_entries([entry])
    book = LeaseBook(server, KEY, "w1", 30)
    entries, lease = take(queue, book)
    assert len(entries) == 1 and lease is not None
    assert book.set_aside([(lease, [1])], f"{KEY}:invalid") == 1
    assert server.lrange(f"{KEY}:invalid", 0, -1) == [data]  # the request's own bytes

    exported = project.run("export", "demo", "invalid")
    assert exported.returncode == 0, exported.stderr
    assert '"error": "decodes now"' in exported.stdout and "http://a.test/" in exported.stdout

    result = project.run("requeue", "demo", "--invalid")
    assert result.returncode == 0, result.stderr
    assert "Invalid entries put back in the queue: 1" in result.stdout
    assert server.llen(f"{KEY}:invalid") == 0
    # in the queue of SCHEDULER_QUEUE_CLASS, which the workers carry into its slot
    assert server.lrange(f"{KEY}:prio:7", 0, -1) == [data]
