"""What one queue entry may make a worker build: hostile entries are refused before they
are built, and set aside; real requests of any usual size still round-trip.

Memory is measured with tracemalloc (the peak of what Python allocated while the
worker read the entry), never time.
"""

from __future__ import annotations

import logging
import tracemalloc
import zlib

import pytest
from scrapy import Request

from helpers import make_spider
from scrapy_redis import picklecompat
from scrapy_redis.exceptions import UndecodableRequestError, UnserializableRequestError
from scrapy_redis.queue import FifoQueue
from scrapy_redis.serializers import MAX_ENTRY_SIZE, MAX_ITEMS, MsgpackSerializer

MiB = 1024 * 1024
#: What reading one hostile entry may allocate at most, here (the limits allow ~70 MiB).
PEAK = 16 * MiB


def deflated(data: bytes) -> bytes:
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15)
    return b"\xc1\xc1" + deflater.compress(data) + deflater.flush()


def empty_maps(count: int) -> bytes:
    """A request map ``{0: [{}, {}, ...]}``: ``count`` one-byte empty maps in one array."""
    return b"\x81\x00\xdd" + count.to_bytes(4, "big") + b"\x80" * count


def peak_while(call) -> int:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture
def spider():
    return make_spider()


def test_a_decompression_bomb_is_set_aside_without_being_built(
    settings_dict, server, schedulers, caplog
):
    """A 4 KB entry inflating to 4 Mi empty maps (300 MB of Python objects, 4.8 GB for
    the 65 KB entry of the report) stops inflating at the size limit."""
    bomb = deflated(empty_maps(4 * MiB))
    assert len(bomb) < 8192
    server.lpush("demo:requests", bomb)
    scheduler = schedulers(
        {**settings_dict, "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueue"}
    )
    scheduler.enqueue_request(Request("http://example.com/ok"))
    taken = []
    with caplog.at_level(logging.ERROR):
        peak = peak_while(lambda: taken.append(scheduler.next_request()))
    assert taken[0].url == "http://example.com/ok"
    assert server.lrange("demo:requests:invalid", 0, -1) == [bomb]
    assert scheduler.stats.get_value("scheduler/invalid/redis") == 1
    [error] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "larger than 1 MiB once inflated" in error and "demo:requests:invalid" in error
    assert peak < PEAK, f"{peak / MiB:.0f} MiB allocated"


def test_a_huge_container_is_refused_at_its_header(server, spider):
    """Within the size limit, one array of 900,000 empty maps (60 MB of objects) is
    refused when its header is read: no container may hold more than MAX_ITEMS."""
    entry = b"\xc1" + empty_maps(900_000)
    assert len(entry) < MAX_ENTRY_SIZE
    server.lpush("q", entry)
    queue = FifoQueue(server, spider, "q")
    errors = []

    def pop():
        with pytest.raises(UndecodableRequestError) as info:
            queue.pop()
        errors.append(str(info.value))

    assert peak_while(pop) < PEAK
    assert "exceeds max_array_len" in errors[0]
    assert server.llen("q:invalid") == 1


def test_an_entry_stored_without_deflate_is_held_to_the_same_limit(server, spider):
    entry = b"\xc1" + b"\x81\x00\xc6" + (2 * MiB).to_bytes(4, "big") + bytes(2 * MiB)
    server.lpush("q", entry)
    with pytest.raises(UndecodableRequestError, match="larger than 1 MiB"):
        FifoQueue(server, spider, "q").pop()


def test_requests_up_to_the_limit_are_stored_and_read(server, spider):
    queue = FifoQueue(server, spider, "q")
    """A 600 KB body, a list of MAX_ITEMS items and a map of 10,000 in meta."""
    body = bytes(range(256)) * 2400
    meta = {"ids": [i % 100 for i in range(MAX_ITEMS)], "by_id": {str(i): i for i in range(10_000)}}
    request = Request("https://example.com/upload", method="POST", body=body, meta=meta)
    queue.push(request)
    out = queue.pop()
    assert out.body == body and out.meta == meta


@pytest.mark.parametrize(
    "request_obj, reason",
    [
        (Request("https://example.com/", body=bytes(MAX_ENTRY_SIZE)), "over the 1 MiB"),
        (Request("https://example.com/", meta={"ids": [0] * (MAX_ITEMS + 1)}), "100000 items"),
    ],
    ids=["size", "items"],
)
def test_what_the_limits_refuse_is_not_stored(server, spider, request_obj, reason):
    """What a worker would refuse to read is refused when written, with the fix: the
    scheduler then keeps the request in the worker's memory (scheduler-unserializable)."""
    queue = FifoQueue(server, spider, "q")
    with pytest.raises(UnserializableRequestError, match=reason) as info:
        queue.push(request_obj)
    assert "MsgpackSerializer(max_entry_size=" in str(info.value)
    assert server.llen("q") == 0


def test_a_serializer_with_larger_limits_stores_larger_requests(server, spider):
    serializer = MsgpackSerializer(max_entry_size=8 * MiB, max_items=MAX_ITEMS * 2)
    queue = FifoQueue(server, spider, "q", serializer=serializer)
    request = Request(
        "https://example.com/", body=bytes(3 * MiB), meta={"ids": [0] * (MAX_ITEMS + 1)}
    )
    queue.push(request)
    out = queue.pop()
    assert out.body == request.body and out.meta == request.meta
    # the default serializer refuses that entry (set aside), the larger one reads it
    server.lpush("q", serializer.dumps(request.to_dict()))
    with pytest.raises(UndecodableRequestError):
        FifoQueue(server, spider, "q").pop()
    assert repr(serializer) == (
        "scrapy_redis.serializers.MsgpackSerializer(max_entry_size=8388608, max_items=200000)"
    )


def test_pickle_is_not_limited(server, spider):
    """The pickle serializer (opt-in, for trusted writers only) has no such limits."""
    queue = FifoQueue(server, spider, "q", serializer=picklecompat)
    request = Request("https://example.com/", body=bytes(3 * MiB), meta={"ids": [0] * 200_000})
    queue.push(request)
    out = queue.pop()
    assert out.body == request.body and out.meta == request.meta


def test_a_request_too_large_to_store_is_logged_in_a_short_line(
    settings_dict, server, schedulers, caplog
):
    """A 2 MB URL (a start message can carry one) makes a request over the limit: kept in
    the worker's memory, with a warning that quotes it bounded."""
    scheduler = schedulers(settings_dict)
    request = Request("https://example.com/" + "a" * 2 * MiB)
    with caplog.at_level(logging.WARNING):
        scheduler.enqueue_request(request)
        assert scheduler.send_enqueued()
    [line] = [r.getMessage() for r in caplog.records if "Unable to serialize" in r.getMessage()]
    assert len(line) < 1500, line[:3000]
    assert "over the 1 MiB limit" in line
    assert scheduler.next_request() is request
