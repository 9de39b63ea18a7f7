"""Contract tests of the request queues, against a real Redis."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import random
import re
import string
import subprocess
import sys
import zlib

import msgpack
import pytest
import redis
from scrapy import Request
from scrapy.http import FormRequest, JsonRequest
from scrapy.utils.request import request_from_dict
from w3lib.url import safe_url_string

from helpers import make_spider
from scrapy_redis import picklecompat
from scrapy_redis.encoding.reqser import (
    SAFE_URL,
    dict_to_request,
    owned_dict_to_request,
    request_to_dict,
)
from scrapy_redis.exceptions import ScrapyRedisDeprecationWarning, UndecodableRequestError
from scrapy_redis.queue import (
    Base,
    FifoQueue,
    LifoQueue,
    PriorityQueue,
    SpiderPriorityQueue,
    SpiderQueue,
    SpiderStack,
)
from scrapy_redis.queues.base import new_flags
from scrapy_redis.serializers import msgpack_serializer, with_defaults
from scrapy_redis.spiders import RedisCrawlSpider


class QueueTestMixin:
    queue_cls: type

    @pytest.fixture
    def spider(self):
        return make_spider()

    @pytest.fixture
    def queue(self, server, spider):
        return self.queue_cls(server, spider, "%(spider)s:requests")

    def test_key_formatted_once(self, queue):
        assert queue.key == "demo:requests"

    def test_empty(self, queue):
        assert len(queue) == 0
        assert queue.is_empty()
        assert queue.pop() is None

    def test_push_pop_roundtrip(self, queue):
        request = Request(
            "https://example.com/ä?q=1",
            method="POST",
            body=b"\x00\xffbin",
            headers={"X-A": ["1", "2"]},
            cookies={"c": "v"},
            priority=3,
            meta={"k": [1, 2.5, None, True, {"n": "ü"}], "b": b"raw"},
            cb_kwargs={"x": 1},
            callback=queue.spider.parse_item,
            errback=queue.spider.on_error,
            flags=["f"],
        )
        queue.push(request)
        assert len(queue) == 1
        assert not queue.is_empty()
        out = queue.pop()
        assert out.to_dict(spider=queue.spider) == request.to_dict(spider=queue.spider)
        assert out.callback == queue.spider.parse_item
        assert out.errback == queue.spider.on_error
        assert len(queue) == 0

    @pytest.mark.parametrize(
        "request_obj",
        [
            FormRequest("https://example.com/f", formdata={"a": "1", "b": ["x", "y"]}),
            JsonRequest("https://example.com/j", data={"x": [1, 2]}),
        ],
    )
    def test_request_subclasses(self, queue, request_obj):
        queue.push(request_obj)
        out = queue.pop()
        assert type(out) is type(request_obj)
        assert out.body == request_obj.body
        assert out.to_dict() == request_obj.to_dict()

    def test_clear(self, queue, server):
        for i in range(5):
            queue.push(Request(f"https://example.com/{i}", priority=i % 2))
        queue.clear()
        assert len(queue) == 0
        assert queue.pop() is None
        assert server.keys("demo:requests*") == []

    def test_identical_dont_filter_requests_are_all_kept(self, queue):
        for _ in range(5):
            queue.push(Request("https://example.com/same", dont_filter=True))
        assert len(queue) == 5
        assert [queue.pop() is not None for _ in range(6)] == [True] * 5 + [False]

    def test_unserializable_request_raises_value_error(self, queue):
        with pytest.raises(ValueError, match=r"not an instance method|cannot encode"):
            queue.push(Request("https://example.com", callback=lambda r: None))
        with pytest.raises(ValueError):
            queue.push(Request("https://example.com", meta={"o": object()}))
        assert len(queue) == 0

    def test_undecodable_entry_moved_to_invalid_key(self, queue, server):
        queue.push(Request("https://example.com/ok"))
        garbage = b"\xc1garbage"
        _push_raw(queue, garbage)
        popped = []
        errors = 0
        for _ in range(3):
            try:
                popped.append(queue.pop())
            except UndecodableRequestError as exc:
                assert "SCHEDULER_SERIALIZER" in str(exc)
                errors += 1
        assert errors == 1
        assert [r.url for r in popped if r] == ["https://example.com/ok"]
        assert server.lrange("demo:requests:invalid", 0, -1) == [garbage]

    def test_pickle_entry_without_pickle_is_left_in_place(self, queue):
        legacy = pickle.dumps(Request("https://example.com/old").to_dict(), protocol=5)
        _push_raw(queue, legacy)
        with pytest.raises(UndecodableRequestError, match=r"scrapy_redis\.picklecompat") as info:
            queue.pop()
        assert info.value.looks_like_pickle
        assert len(queue) == 1  # not deleted

    def test_pickle_serializer_selected_by_module_path(self, server, spider):
        queue = self.queue_cls(server, spider, "q", serializer="scrapy_redis.picklecompat")
        queue.push(Request("https://example.com/p", meta={"x": (1, 2)}))
        assert queue.pop().meta == {"x": (1, 2)}

    def test_custom_serializer_object(self, server, spider):
        queue = self.queue_cls(server, spider, "q", serializer=picklecompat)
        queue.push(Request("https://example.com/p"))
        assert queue.pop().url == "https://example.com/p"

    def test_serializer_without_loads_is_rejected(self, server, spider):
        with pytest.raises(TypeError, match="loads"):
            self.queue_cls(server, spider, "q", serializer=object())

    def test_decode_responses_client(self, redis_url, spider):
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        queue = self.queue_cls(client, spider, "q")
        queue.push(Request("https://example.com/bin", body=b"\xff\x00"))
        assert queue.pop().body == b"\xff\x00"
        client.close()


def _push_raw(queue, data: bytes) -> None:
    """Store ``data`` as the original scrapy-redis would have stored an entry."""
    if isinstance(queue, PriorityQueue):
        queue.server.execute_command("ZADD", queue.key, 0, data)
    else:
        queue.server.lpush(queue.key, data)


class TestFifoQueue(QueueTestMixin):
    queue_cls = FifoQueue

    def test_order(self, queue):
        for i in range(5):
            queue.push(Request(f"https://example.com/{i}", priority=i))
        assert [queue.pop().url[-1] for _ in range(5)] == list("01234")

    def test_reads_original_pickled_list(self, server, spider):
        for i in range(3):  # the original: LPUSH of pickled Request.to_dict()
            server.lpush(
                "demo:requests",
                pickle.dumps(
                    Request(f"https://example.com/{i}").to_dict(spider=spider), protocol=5
                ),
            )
        queue = self.queue_cls(server, spider, "demo:requests", "scrapy_redis.picklecompat")
        assert [queue.pop().url for _ in range(3)] == [f"https://example.com/{i}" for i in range(3)]


class TestLifoQueue(QueueTestMixin):
    queue_cls = LifoQueue

    def test_order(self, queue):
        for i in range(5):
            queue.push(Request(f"https://example.com/{i}", priority=i))
        assert [queue.pop().url[-1] for _ in range(5)] == list("43210")


class TestPriorityQueue(QueueTestMixin):
    queue_cls = PriorityQueue

    def test_order_higher_priority_first_fifo_within(self, queue):
        pushes = [("c", 0), ("a", 0), ("x", 5), ("b", 0), ("y", 5), ("n", -2)]
        for name, priority in pushes:
            queue.push(Request(f"https://example.com/{name}", priority=priority))
        assert len(queue) == 6
        assert [queue.pop().url[-1] for _ in range(6)] == list("xycabn")

    def test_reads_original_pickled_sorted_set(self, server, spider):
        # The original: ZADD key -priority pickle(Request.to_dict()).
        for name, priority in [("lo", 0), ("hi", 7)]:
            data = pickle.dumps(
                Request(f"https://example.com/{name}", priority=priority).to_dict(spider=spider),
                protocol=5,
            )
            server.execute_command("ZADD", "demo:requests", -priority, data)
        queue = self.queue_cls(server, spider, "demo:requests", "scrapy_redis.picklecompat")
        queue.push(Request("https://example.com/mid", priority=3))
        assert len(queue) == 3
        assert [queue.pop().url.rsplit("/", 1)[1] for _ in range(3)] == ["hi", "mid", "lo"]
        assert queue.pop() is None

    def test_pickle_entry_restored_with_its_score(self, queue, server):
        legacy = pickle.dumps(Request("https://example.com/old").to_dict(), protocol=5)
        server.execute_command("ZADD", queue.key, -4, legacy)
        with pytest.raises(UndecodableRequestError):
            queue.pop()
        assert server.zscore(queue.key, legacy) == -4

    def test_restore_keeps_order(self, queue):
        for name in "abc":
            queue.push(Request(f"https://example.com/{name}", priority=1))
        entries = queue.pop_entries(2)
        queue.restore_entries(entries)
        assert [queue.pop().url[-1] for _ in range(3)] == list("abc")


@pytest.mark.parametrize(
    "alias, target",
    [
        (SpiderQueue, FifoQueue),
        (SpiderStack, LifoQueue),
        (SpiderPriorityQueue, PriorityQueue),
    ],
)
def test_deprecated_aliases_warn(server, alias, target):
    with pytest.warns(ScrapyRedisDeprecationWarning, match=target.__name__):
        queue = alias(server, make_spider(), "q")
    assert isinstance(queue, target)


_PROJECT_QUEUE = """
import redis
from scrapy import Spider
from scrapy_redis.queue import SpiderPriorityQueue

def open_queue():
    return SpiderPriorityQueue(redis.Redis(), Spider(name="demo"), "demo:requests")
"""


def test_deprecated_alias_warns_under_default_filters(tmp_path):
    """Python hides a DeprecationWarning raised from library code by default: a project's
    module using the alias must see ours, as Scrapy's own (Warning subclasses) are seen."""
    (tmp_path / "project_queue.py").write_text(_PROJECT_QUEUE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    result = subprocess.run(
        [sys.executable, "-c", "import project_queue; project_queue.open_queue()"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "ScrapyRedisDeprecationWarning: scrapy_redis.queue.SpiderPriorityQueue is "
        "deprecated, use scrapy_redis.queue.PriorityQueue" in result.stderr
    )


def _producer(url: str, queue_name: str, worker: int, count: int) -> None:
    client = redis.Redis.from_url(url)
    queue = _QUEUES[queue_name](client, make_spider(), "shared")
    for i in range(count):
        queue.push(Request(f"https://example.com/{worker}/{i}", priority=i % 3))


def _consumer(url: str, queue_name: str, results) -> None:
    client = redis.Redis.from_url(url)
    queue = _QUEUES[queue_name](client, make_spider(), "shared")
    seen, misses = [], 0
    while misses < 50:
        request = queue.pop()
        if request is None:
            misses += 1
            continue
        misses = 0
        seen.append(request.url)
    results.put(seen)


_QUEUES = {"fifo": FifoQueue, "lifo": LifoQueue, "priority": PriorityQueue}


@pytest.mark.parametrize("queue_name", list(_QUEUES))
def test_concurrent_producers_and_consumers(server, redis_url, queue_name):
    """Several processes push and pop the same queue: nothing lost, nothing twice."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    producers = [
        ctx.Process(target=_producer, args=(redis_url, queue_name, w, 300)) for w in range(3)
    ]
    consumers = [
        ctx.Process(target=_consumer, args=(redis_url, queue_name, results)) for _ in range(3)
    ]
    for process in producers + consumers:
        process.start()
    seen = [url for _ in consumers for url in results.get(timeout=60)]
    for process in producers + consumers:
        process.join(30)
    leftover = _QUEUES[queue_name](server, make_spider(), "shared")
    while (request := leftover.pop()) is not None:
        seen.append(request.url)
    assert len(seen) == 900
    assert len(set(seen)) == 900


class TaggedRequest(Request):
    """A user Request subclass with an attribute of its own."""

    attributes = (*Request.attributes, "tag")

    def __init__(self, *args, tag=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.tag = tag


@pytest.mark.parametrize("queue_cls", [FifoQueue, PriorityQueue])
def test_user_request_subclass_roundtrip(server, queue_cls):
    queue = queue_cls(server, make_spider(), "q")
    queue.push(TaggedRequest("https://example.com/t", tag={"k": b"v"}))
    out = queue.pop()
    assert type(out) is TaggedRequest
    assert out.tag == {"k": b"v"}


def test_request_class_from_unimported_module_is_refused(server):
    queue = FifoQueue(server, make_spider(), "q")
    crafted = {**Request("https://example.com").to_dict(), "_class": "antigravity.Request"}
    server.lpush("q", msgpack_serializer.dumps(crafted))
    with pytest.raises(UndecodableRequestError, match="imported module"):
        queue.pop()
    assert "antigravity" not in __import__("sys").modules
    assert server.llen("q:invalid") == 1


def zlib_raw(data: bytes) -> bytes:
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15)
    return deflater.compress(data) + deflater.flush()


def msgpack_serializer_plain(obj: dict) -> bytes:
    """An entry as written before deflate was used: the tag and the msgpack map."""
    from scrapy_redis.serializers import FIELD_CODES, STORED_DEFAULTS

    def is_default(name, value):
        default = STORED_DEFAULTS.get(name)
        return name in STORED_DEFAULTS and type(value) is type(default) and value == default

    packed = {FIELD_CODES.get(k, k): v for k, v in obj.items() if not is_default(k, v)}
    return b"\xc1" + msgpack.packb(packed, use_bin_type=True)


def bad_deflated(kind: str) -> bytes:
    if kind == "bomb":  # 65 MiB of zeros once inflated
        return zlib_raw(b"\x81\x00\xa1x" + bytes(65 * 1024 * 1024))
    if kind == "truncated":
        return zlib_raw(msgpack.packb({0: "https://example.com/" * 20}))[:-3]
    return b"not deflate data"


class TestCompactEntries:
    """The default serializer deflates long entries and reads every form it wrote."""

    @pytest.fixture
    def spider(self):
        return make_spider()

    def long_request(self, spider) -> Request:
        url = "https://www.example.com/catalog/garden/item-0001234-stainless-steel.html?page=3"
        return Request(
            url,
            callback=spider.parse,
            headers={"Referer": url.replace("0001234", "0000123")},
            meta={"depth": 3, "category": "garden"},
        )

    def test_long_entries_are_deflated_and_read_back(self, server, spider):
        queue = FifoQueue(server, spider, "q")
        request = self.long_request(spider)
        queue.push(request)
        [stored] = server.lrange("q", 0, -1)
        plain = msgpack_serializer_plain(request_to_dict(request, spider))
        assert stored.startswith(b"\xc1\xc1") and len(stored) < 0.8 * len(plain)
        assert queue.pop().to_dict(spider=spider) == request.to_dict(spider=spider)

    def test_entries_written_without_deflate_are_read(self, server, spider):
        queue = FifoQueue(server, spider, "q")
        request = self.long_request(spider)
        server.lpush("q", msgpack_serializer_plain(request_to_dict(request, spider)))
        assert queue.pop().to_dict(spider=spider) == request.to_dict(spider=spider)

    def test_entries_deflated_with_fitted_codes_are_read(self, server, spider):
        """Entries deflated with codes fitted to them (as written before fixed codes were
        used for entries of usual size, and still for large ones) are read."""
        queue = FifoQueue(server, spider, "q")
        request = self.long_request(spider)
        plain = msgpack_serializer_plain(request_to_dict(request, spider))
        server.lpush("q", b"\xc1\xc1" + zlib_raw(plain[1:]))
        assert queue.pop().to_dict(spider=spider) == request.to_dict(spider=spider)

    def test_large_entries_are_deflated_with_fitted_codes(self, server, spider):
        queue = FifoQueue(server, spider, "q")
        words = random.Random(1).choices(["alpha", "beta", "gamma", "delta", "eps"], k=3000)
        request = Request("https://example.com/", body=" ".join(words).encode())
        queue.push(request)
        [stored] = server.lrange("q", 0, -1)
        plain = msgpack_serializer_plain(request_to_dict(request, spider))[1:]
        fixed = zlib.compressobj(1, zlib.DEFLATED, -15, 8, zlib.Z_FIXED)
        assert stored.startswith(b"\xc1\xc1")
        assert len(stored) - 2 < 0.8 * len(fixed.compress(plain) + fixed.flush())
        assert queue.pop().body == request.body

    def test_short_entries_are_not_deflated(self, server, spider):
        queue = FifoQueue(server, spider, "q")
        queue.push(Request("https://example.com/"))
        assert server.lrange("q", 0, -1) == [b"\xc1\x81\x00\xb4https://example.com/"]

    @pytest.mark.parametrize("kind", ["bomb", "truncated", "garbage"])
    def test_bad_deflated_entries_are_set_aside(self, server, spider, kind):
        queue = FifoQueue(server, spider, "q")
        server.lpush("q", b"\xc1\xc1" + bad_deflated(kind))
        with pytest.raises(UndecodableRequestError):
            queue.pop()
        assert server.llen("q:invalid") == 1


class DontFilterByDefault(Request):
    """A subclass with another default than Request's (as XmlRpcRequest has)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("dont_filter", True)
        super().__init__(*args, **kwargs)


def test_subclass_with_other_defaults_comes_back_the_same(server):
    spider = make_spider()
    queue = FifoQueue(server, spider, "q")
    queue.push(DontFilterByDefault("https://example.com/", dont_filter=False))
    popped = queue.pop()
    assert type(popped) is DontFilterByDefault and popped.dont_filter is False


@pytest.mark.parametrize("queue_cls", [FifoQueue, LifoQueue, PriorityQueue])
def test_a_retried_pop_answers_what_the_first_one_leased(server, queue_cls):
    """redis-py resends a command whose reply was lost: the retry must not pop more
    (the first batch would be in no queue and no lease)."""
    from scrapy_redis.queues.leases import LeaseBook

    spider = make_spider()
    queue = queue_cls(server, spider, "q")
    for i in range(6):
        queue.push(Request(f"https://example.com/{i}"))
    ticket = LeaseBook(server, "q", "w", 60).ticket()
    first = queue.pop_entries(4, ticket=ticket)
    again = queue.pop_entries(4, ticket=ticket)  # the same call, sent again
    assert [e.data for e in again] == [e.data for e in first] and len(first) == 4
    assert len(queue) == 2


def test_giving_back_nothing_leaves_no_empty_priority(server):
    from scrapy_redis.queues.leases import LeaseBook
    from scrapy_redis.store.scripts import script

    queue = PriorityQueue(server, make_spider(), "q")
    for i in range(2):
        queue.push(Request(f"https://example.com/{i}", priority=5))
    book = LeaseBook(server, "q", "w", 60)
    ticket = book.ticket()
    assert len(queue.pop_entries(2, ticket=ticket)) == 2
    assert server.zcard("q") == 0
    script("lease_ack")(server, book.keys, [ticket.id, 1, 1])  # the first one is done
    keys = [*book.requeue_keys, "q", "q:prio:5"]
    assert script("lease_requeue")(server, keys, ["all", 3, ticket.id, 1, 1]) == [0, 0]
    assert server.zcard("q") == 0  # no priority without a list behind it
    assert queue.is_empty() and len(queue) == 0


class WithSpider:
    @pytest.fixture
    def spider(self):
        return make_spider()


class TestRequestToDict(WithSpider):
    """Our request_to_dict() gives what Request.to_dict(spider=...) gives, faster."""

    def requests(self, spider) -> list[Request]:
        return [
            Request("https://example.com/a"),
            Request("https://example.com/b", callback=spider.parse, errback=spider.on_error),
            Request("https://example.com/c", errback=spider.on_error, priority=3),
            FormRequest("https://example.com/d", formdata={"q": "x"}, callback=spider.parse_item),
            JsonRequest("https://example.com/e", data={"q": 1}, meta={"depth": 2}),
        ]

    def test_same_dict_as_scrapy(self, spider):
        for request in self.requests(spider):
            assert request_to_dict(request, spider) == request.to_dict(spider=spider)

    def test_method_of_another_spider_instance_is_named_as_scrapy_does(self, spider):
        other = make_spider()
        request = Request("https://example.com/", callback=other.parse)
        assert request_to_dict(request, spider) == request.to_dict(spider=spider)

    def test_callback_that_is_not_a_spider_method_is_refused(self, spider):
        def parse(response):  # a function of the same name, not the spider's method
            return None

        for callback in (parse, lambda response: None):
            with pytest.raises(ValueError, match="not an instance method"):
                request_to_dict(Request("https://example.com/", callback=callback), spider)


class TestDictToRequest(WithSpider):
    """Our dict_to_request() builds the request Scrapy's request_from_dict() builds."""

    def requests(self, spider) -> list[Request]:
        return [
            *TestRequestToDict().requests(spider),
            Request("https://example.com/p?b=2&a=1", meta={"depth": 3}, cookies={"c": "1"}),
            Request("https://example.com/", meta={"verbatim_url": True}, flags=["f"]),
            Request("https://example.com/r\u00e9sum\u00e9 x", cb_kwargs={"k": 1}),
        ]

    def test_same_request_as_scrapy(self, spider):
        for request in self.requests(spider):
            data = request_to_dict(request, spider)
            ours = dict_to_request(dict(data), spider)
            theirs = request_from_dict(dict(data), spider=spider)
            assert type(ours) is type(theirs)
            assert ours.to_dict(spider=spider) == theirs.to_dict(spider=spider) == data

    def test_owned_dicts_give_the_same_request(self, spider):
        for request in self.requests(spider):
            data = request_to_dict(request, spider)
            owned = msgpack_serializer.loads_stored(msgpack_serializer.dumps(data))
            if "_class" in owned:  # as the queue decodes it
                owned = with_defaults(owned)
            ours = owned_dict_to_request(owned, spider)
            assert type(ours) is type(request)
            assert ours.to_dict(spider=spider) == data
        extra = {"url": "https://example.com/", "meta": {"d": 1}, "not_a_field": 1}
        assert owned_dict_to_request(extra, spider).meta == {"d": 1}

    def test_the_callers_dict_and_meta_are_left_as_they_are(self, spider):
        meta = {"d": 1}
        data = {"url": "https://example.com/a", "callback": "parse", "meta": meta}
        request = dict_to_request(data, spider)
        assert data == {"url": "https://example.com/a", "callback": "parse", "meta": {"d": 1}}
        assert data["meta"] is meta
        assert request.meta == {"d": 1} and request.meta is not meta
        assert request.callback == spider.parse

    def test_verbatim_url_is_used_while_building_then_removed(self, spider):
        request = dict_to_request({"url": "https://example.com/a?x=1", "meta": {"d": 1}}, spider)
        assert request.meta == {"d": 1}
        assert "verbatim_url" not in dict_to_request({"url": "https://example.com/"}, spider).meta
        kept = dict_to_request({"url": "https://example.com/", "meta": {"verbatim_url": 1}}, spider)
        assert kept.meta == {"verbatim_url": 1}

    @pytest.mark.parametrize(
        "url",
        [
            "https://example.com/a b",
            "https://example.com/a\r\nX-Injected: 1",
            "https://example.com/\u00e9",
            "https://example.com/<script>",
            "https://example.com/a'b",
        ],
    )
    def test_urls_from_crafted_entries_are_made_safe(self, spider, url):
        request = dict_to_request({"url": url}, spider)
        assert request.url == safe_url_string(url)
        assert " " not in request.url and "\n" not in request.url and request.url.isascii()

    @pytest.mark.parametrize(
        "url",
        [
            "http://EXAMPLE.com/",
            "HTTP://host/",
            "http://host/?",
            "http://host:/",
            "http://host:0080/",
            "http://us%41er@host/",
            "http://user:pw@host/",
            "http://host:65535/a",
            "http://[::1]/a",
        ],
    )
    def test_urls_not_in_normal_form_are_normalised_as_scrapy_does(self, spider, url):
        assert dict_to_request({"url": url}, spider).url == safe_url_string(url)

    @pytest.mark.parametrize("url", ["http://host:abc/", "http://host:99999/"])
    def test_invalid_ports_are_refused_as_scrapy_does(self, spider, url):
        with pytest.raises(ValueError):
            request_from_dict({"url": url}, spider=spider)
        with pytest.raises(ValueError):
            dict_to_request({"url": url}, spider)

    def test_generated_urls_give_scrapys_url(self, spider):
        rnd = random.Random(4)
        pieces = {
            "scheme": ["http", "https", "HTTP", "ftp"],
            "host": ["example.com", "Example.com", "a.b", "h.", "127.0.0.1", "u@h", "h_x"],
            "port": ["", ":8080", ":1", ":9999", ":10000", ":65535", ":65536", ":080", ":"],
            "chars": string.ascii_letters + string.digits + "!$%&()*+,-./:;=@_~?#'\" [] ^",
        }
        fast = 0
        for _ in range(5000):
            path = "".join(rnd.choice(pieces["chars"]) for _ in range(rnd.randint(0, 15)))
            url = (
                f"{rnd.choice(pieces['scheme'])}://{rnd.choice(pieces['host'])}"
                f"{rnd.choice(pieces['port'])}/{path}"
            )
            try:
                expected = request_from_dict({"url": url}, spider=spider).url
            except ValueError:
                with pytest.raises(ValueError):
                    dict_to_request({"url": url}, spider)
                continue
            assert dict_to_request({"url": url}, spider).url == expected, url
            fast += SAFE_URL.fullmatch(url) is not None
        assert fast > 200  # the verbatim path was exercised

    def test_meta_that_is_not_a_dict_is_left_to_scrapy(self, spider):
        data = {"url": "https://example.com/", "meta": [("depth", 1)]}
        assert dict_to_request(data, spider).meta == request_from_dict(data, spider=spider).meta

    def test_decoded_dicts_do_not_share_mutable_defaults(self, spider):
        encoded = msgpack_serializer.dumps(request_to_dict(Request("https://example.com/"), spider))
        first, second = msgpack_serializer.loads(encoded), msgpack_serializer.loads(encoded)
        first["meta"]["x"] = 1
        first["headers"][b"A"] = [b"b"]
        first["flags"].append("f")
        assert second["meta"] == {} and second["headers"] == {} and second["flags"] == []
        assert msgpack_serializer.loads(encoded)["cb_kwargs"] == {}


def test_push_script_replies_are_checked():
    """A reply of another length or alphabet (a client decoding it, a changed script)
    must not read as "all duplicates", which would drop every request silently."""
    assert new_flags(b"101", 3) == [True, False, True]
    assert new_flags("01", 2) == [False, True]  # a client that decoded it
    for reply in (b"10", b"1x1", b"", [1, 0, 1]):
        with pytest.raises(ValueError, match="unexpected reply"):
            new_flags(reply, 3)


# -- untrusted entries: callbacks and error lines ------------------------------------------


class RedisDemoSpider(RedisCrawlSpider):
    name = "redisdemo"

    def parse_item(self, response):  # pragma: no cover
        return None

    def _parse_detail(self, response):  # pragma: no cover
        return None


@pytest.mark.parametrize(
    "name",
    [
        "__init__",
        "__class__",
        "_set_crawler",  # scrapy.Spider's
        "log",
        "close",  # a static method
        "from_crawler",  # class methods
        "update_settings",
        "setup_redis",  # scrapy-redis's
        "_stop_polling",
        "spider_idle",
        "name",  # not methods
        "crawler",
        "nope",
    ],
)
@pytest.mark.parametrize("field", ["callback", "errback"])
def test_entry_naming_a_callback_that_is_not_the_spiders_own_is_set_aside(
    server, redis_url, name, field
):
    """Only methods of the spider's own classes, bound to it: the rule start messages
    follow too (test_spiders.py). Scrapy's own request_from_dict() takes any attribute."""
    spider = make_spider({"REDIS_URL": redis_url}, RedisDemoSpider)
    queue = FifoQueue(server, spider, "q")
    crafted = {**Request("https://example.com/").to_dict(), field: name}
    server.lpush("q", msgpack_serializer.dumps(crafted))
    with pytest.raises(UndecodableRequestError, match="spider has no method"):
        queue.pop()
    assert server.llen("q:invalid") == 1


@pytest.mark.parametrize("name", ["parse_item", "_parse_detail", "_callback", "_errback"])
def test_entry_naming_a_method_of_the_spiders_own_classes_is_read(server, redis_url, name):
    """Private callbacks of the user's spider, and CrawlSpider's _callback/_errback (its
    rules' requests), are written by request_to_dict() and read back."""
    spider = make_spider({"REDIS_URL": redis_url}, RedisDemoSpider)
    queue = FifoQueue(server, spider, "q")
    method = getattr(spider, name)
    queue.push(Request("https://example.com/", callback=method, errback=method))
    request = queue.pop()
    assert request.callback == method and request.errback == method


@pytest.mark.parametrize("field", ["url", "callback", "_class"])
def test_errors_about_huge_values_are_short(server, field):
    queue = FifoQueue(server, make_spider(), "q")
    value = {"url": "no-scheme-", "callback": "x", "_class": "a."}[field] + "x" * 900_000
    crafted = {**Request("https://example.com/").to_dict(), field: value}
    server.lpush("q", msgpack_serializer.dumps(crafted))
    with pytest.raises(UndecodableRequestError) as info:
        queue.pop()
    assert len(str(info.value)) < 1500, str(info.value)[:3000]
    assert "characters)" in str(info.value)


# -- the parts queue.Base is made of -------------------------------------------------------


def test_pop_reply_codes_are_those_the_script_documents():
    """PopReply names the codes pop_priority.lua's header lists, one line each."""
    from importlib import resources

    from scrapy_redis.queues.priority import PopReply

    header = resources.files("scrapy_redis.store.lua").joinpath("pop_priority.lua").read_text()
    documented = {int(code) for code in re.findall(r"^--\s+(?:returns )?\{(\d)\b", header, re.M)}
    assert documented == {member.value for member in PopReply}


def test_lease_records_the_pop_scripts_write_are_read_back(server):
    from scrapy_redis.queues.leases import LeaseBook
    from scrapy_redis.queues.records import record_entries, record_keys, unpack_record

    for queue in (FifoQueue(server, make_spider(), "l"), PriorityQueue(server, make_spider(), "p")):
        for i in range(3):
            queue.push(Request(f"https://example.com/{i}", priority=7))
        ticket = LeaseBook(server, queue.key, "w", 60).ticket()
        popped = queue.pop_entries(2, ticket=ticket)
        raw = server.hget(f"{queue.key}:leases", ticket.id)
        record = unpack_record(raw)
        assert record.entries == [entry.data for entry in popped] == record_entries(raw)
        if isinstance(queue, PriorityQueue):
            assert (record.op, record.key, record.priority) == (b"prio", "p:prio:7", 7)
            assert record_keys(raw) == record.keys == ["p:prio:7", "p"]
        else:
            assert (record.op, record.key, record.priority) == (b"rpush", "l", None)
            assert record_keys(raw) == record.keys == ["l"]
    assert record_entries(b"") == []


def test_the_codec_round_trips_and_names_the_key_and_fix():
    from scrapy_redis.encoding.codec import decode_request, encode_request, is_pickle

    spider = make_spider()
    request = Request("https://example.com/c", priority=3, meta={"k": b"v"})
    encoded = encode_request(request, spider, msgpack_serializer)
    decoded = decode_request(encoded, spider, msgpack_serializer, "k")
    assert decoded.to_dict(spider=spider) == request.to_dict(spider=spider)
    assert is_pickle(picklecompat) and not is_pickle(msgpack_serializer)
    pickled = picklecompat.dumps(request.to_dict(spider=spider))
    with pytest.raises(UndecodableRequestError, match=r"'the:key'.*picklecompat") as info:
        decode_request(pickled, spider, msgpack_serializer, "the:key")
    assert info.value.looks_like_pickle
    decoded = decode_request(pickled, spider, picklecompat, "the:key")
    assert decoded.url == request.url


class OriginalContractQueue(Base):
    """A queue class written for the original: its own push/pop over our codec."""

    def push(self, request):
        self.server.lpush(self.key, self._encode_request(request))

    def pop(self, timeout=0):
        data = self.server.rpop(self.key)
        return self._decode_request(data) if data else None


def test_base_encodes_and_decodes_through_the_codec(server):
    queue = OriginalContractQueue(server, make_spider(), "q")
    queue.push(Request("https://example.com/b"))
    assert queue.pop().url == "https://example.com/b"
    server.lpush("q", pickle.dumps({"url": "https://example.com/p"}, protocol=4))
    with pytest.raises(UndecodableRequestError, match=r"'q'.*picklecompat"):
        queue.pop()
