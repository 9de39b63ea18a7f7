"""Requests in a request's meta or cb_kwargs, stored as requests (see
scrapy_redis/encoding/nested_requests.py); the e2e test is test_nested_requests_e2e.py."""

from __future__ import annotations

import logging

import msgpack
import pytest
from scrapy import Request
from scrapy.http import FormRequest

from helpers import make_spider
from scrapy_redis import picklecompat
from scrapy_redis.encoding.nested_requests import MARK, MAX_DEPTH, NESTED
from scrapy_redis.exceptions import UndecodableRequestError, UnserializableRequestError
from scrapy_redis.queue import FifoQueue
from scrapy_redis.serializers import FIELD_CODES


def _queue(server, serializer=None):
    spider = make_spider()
    return spider, FifoQueue(server, spider, "demo:requests", serializer=serializer)


def test_requests_in_meta_and_cb_kwargs_round_trip(server):
    spider, queue = _queue(server)
    inner = FormRequest(
        "http://example.com/form", formdata={"q": "1"}, callback=spider.parse_item,
        errback=spider.on_error, meta={"body": b"\x00\xff"},
    )  # fmt: skip
    outer = Request(
        "http://solver:8191/v1", method="POST", body=b"{}", callback=spider.parse,
        meta={"original_request": inner, "more": [inner, {"deep": inner}], "n": 1},
        cb_kwargs={"again": inner},
    )  # fmt: skip
    decoded = queue._decode_request(queue._encode_request(outer))
    assert decoded.callback == spider.parse and decoded.body == b"{}"
    rebuilt = [
        decoded.meta["original_request"],
        decoded.meta["more"][0],
        decoded.meta["more"][1]["deep"],
        decoded.cb_kwargs["again"],
    ]
    for request in rebuilt:
        assert type(request) is FormRequest
        assert request.to_dict(spider=spider) == inner.to_dict(spider=spider)
    assert decoded.meta["n"] == 1 and NESTED not in decoded.meta


def test_requests_nest_in_requests_up_to_the_limit(server):
    _, queue = _queue(server)
    request = Request("http://example.com/0")
    for n in range(1, MAX_DEPTH + 1):
        request = Request(f"http://example.com/{n}", meta={"original_request": request})
    decoded = queue._decode_request(queue._encode_request(request))
    for n in range(MAX_DEPTH, -1, -1):
        assert decoded.url == f"http://example.com/{n}"
        decoded = decoded.meta.get("original_request")
    too_deep = Request("http://example.com/top", meta={"original_request": request})
    with pytest.raises(UnserializableRequestError, match=f"more than {MAX_DEPTH} deep"):
        queue._encode_request(too_deep)


def test_other_values_are_still_refused(server):
    _, queue = _queue(server)
    with pytest.raises(UnserializableRequestError):
        queue._encode_request(
            Request("http://example.com", meta={"r": Request("http://e.com"), "o": object()})
        )


def test_pickle_stores_them_as_before(server):
    _, queue = _queue(server, picklecompat)
    outer = Request("http://example.com", meta={"original_request": Request("http://e.com")})
    decoded = queue._decode_request(queue._encode_request(outer))
    assert decoded.meta["original_request"].url == "http://e.com"


def _crafted(meta) -> bytes:
    fields = {FIELD_CODES["url"]: "http://example.com", FIELD_CODES["meta"]: meta, NESTED: True}
    return b"\xc1" + msgpack.packb(fields, use_bin_type=True)


@pytest.mark.parametrize(
    "meta, reason",
    [
        ({"r": {MARK: {"url": "http://e.com", "callback": "log"}}}, "spider has no method 'log'"),
        ({"r": {MARK: ["not", "a", "dict"]}}, "not a request dict in meta"),
        ({"r": {MARK: {"url": "http://e.com", "_class": "os.system"}}}, "not a scrapy.Request"),
    ],
)
def test_a_crafted_entry_is_checked_as_a_request_is(server, meta, reason):
    _, queue = _queue(server)
    with pytest.raises(UndecodableRequestError, match=reason):
        queue._decode_request(_crafted(meta))


def test_the_warning_names_the_setting_that_would_keep_them(
    settings_dict, server, schedulers, caplog
):
    scheduler = schedulers(settings_dict)
    with caplog.at_level(logging.WARNING, logger="scrapy_redis.scheduler"):
        scheduler.enqueue_request(Request("http://example.com/obj", meta={"o": object()}))
        scheduler.send_enqueued()
    assert "set SCHEDULER_SERIALIZER = 'scrapy_redis.picklecompat' on every worker" in caplog.text
    assert scheduler.stats.get_value("scheduler/unserializable") == 1
