"""Fingerprints that expire (DUPEFILTER_LIFETIME, issue 27.1): the sorted-set layout, the
per-request lifetime in meta, the push scripts, the sweep, and once across workers."""

from __future__ import annotations

import math
import time

import pytest
import redis
from scrapy import Request

from helpers import make_spider, record_dropped, results_of_processes
from scrapy_redis.core.lifetime import META_KEY, SWEEP_MIN, Expiry, expiry_from_setting
from scrapy_redis.dupefilter import (
    LeanDupeFilter,
    RFPDupeFilter,
    request_fingerprint,
)
from scrapy_redis.exceptions import WrongKeyTypeError
from scrapy_redis.queues.base import Base

KEY = "demo:dupefilter"
URL = "http://example.com/a"


def _dupefilter(settings_dict, **overrides):
    return RFPDupeFilter.from_spider(make_spider({**settings_dict, **overrides}))


def _server_ms(server) -> int:
    seconds, micros = server.time()
    return seconds * 1000 + micros // 1000


def _expire(server, *urls) -> None:
    """Make the fingerprints of ``urls`` expired (as if their lifetime had passed)."""
    past = _server_ms(server) - 1
    for url in urls:
        assert server.zadd(KEY, {request_fingerprint(Request(url)): past}, xx=True, ch=True)


def test_off_by_default_keeps_the_original_set(settings_dict, server):
    df = _dupefilter(settings_dict)
    assert df.expiry is None
    assert df.request_seen(Request(URL, meta={META_KEY: 60})) is False
    assert server.type(KEY) == b"set"


def test_a_fingerprint_is_new_again_once_expired(settings_dict, server):
    df = _dupefilter(settings_dict, DUPEFILTER_LIFETIME=3600)
    before = _server_ms(server)
    assert df.request_seen(Request(URL)) is False
    assert df.request_seen(Request(URL)) is True
    assert server.type(KEY) == b"zset"
    score = server.zscore(KEY, request_fingerprint(Request(URL)))
    assert before + 3_600_000 <= score <= _server_ms(server) + 3_600_000
    _expire(server, URL)
    assert df.request_seen(Request(URL)) is False  # expired: new again, recorded again
    assert df.request_seen(Request(URL)) is True
    assert server.zscore(KEY, request_fingerprint(Request(URL))) >= before + 3_600_000


def test_a_request_gives_its_own_lifetime_in_meta(settings_dict, server):
    df = _dupefilter(settings_dict, DUPEFILTER_LIFETIME=3600)
    now = _server_ms(server)
    df.request_seen(Request("http://example.com/listing", meta={META_KEY: 60}))
    df.request_seen(Request("http://example.com/article", meta={META_KEY: None}))
    df.request_seen(Request("http://example.com/other", meta={META_KEY: 0}))
    scores = {
        url: server.zscore(KEY, request_fingerprint(Request("http://example.com/" + url)))
        for url in ("listing", "article", "other")
    }
    assert now + 60_000 <= scores["listing"] < now + 70_000
    assert scores["article"] == scores["other"] == math.inf
    assert server.ttl(KEY) == -1  # kept forever while one fingerprint is


def test_the_set_expires_with_its_last_fingerprint(settings_dict, server):
    df = _dupefilter(settings_dict, DUPEFILTER_LIFETIME=60)
    df.request_seen(Request(URL))
    assert 55_000 < server.pttl(KEY) <= 60_001


def test_inf_turns_expiry_on_with_forever_as_default(settings_dict, server):
    df = _dupefilter(settings_dict, DUPEFILTER_LIFETIME="inf")
    df.request_seen(Request(URL))
    df.request_seen(Request("http://example.com/b", meta={META_KEY: 1}))
    assert server.zscore(KEY, request_fingerprint(Request(URL))) == math.inf


@pytest.mark.parametrize("value", [-1, "soon", float("nan")])
def test_a_wrong_setting_names_itself(value):
    with pytest.raises(ValueError, match="DUPEFILTER_LIFETIME must be seconds"):
        expiry_from_setting(value)


def test_a_wrong_meta_value_falls_back_to_the_setting(caplog):
    expiry = Expiry(5000)
    assert expiry.lifetime_ms(Request(URL, meta={META_KEY: -3})) == 5000
    assert expiry.lifetime_ms(Request(URL, meta={META_KEY: 0.25})) == 250
    assert "dupefilter_lifetime" in caplog.text


def test_expired_fingerprints_are_swept_a_bounded_number_per_write(settings_dict, server):
    df = _dupefilter(settings_dict, DUPEFILTER_LIFETIME=3600)
    past = _server_ms(server) - 1000
    server.zadd(KEY, {f"{i:040x}": past for i in range(1000)})
    df.request_seen(Request(URL))
    left = server.zcard(KEY)
    assert left == 1001 - (SWEEP_MIN + 2)  # the sweep is bounded: twice what it adds...
    while server.zcard(KEY) > 1:
        df.request_seen(Request(URL))  # ...and runs with every write, duplicates too
    assert server.zrange(KEY, 0, -1) == [request_fingerprint(Request(URL)).encode()]


def test_the_lean_filter_needs_a_finite_lifetime(settings_dict, server):
    spider = make_spider({**settings_dict, "DUPEFILTER_LIFETIME": "inf"})
    with pytest.raises(ValueError, match="LeanDupeFilter needs DUPEFILTER_LIFETIME in seconds"):
        LeanDupeFilter.from_spider(spider)


# -- under the scheduler (the push scripts) -----------------------------------------------


@pytest.mark.parametrize("queue", ["PriorityQueue", "FifoQueue"])
def test_push_scripts_honour_expiry(settings_dict, server, schedulers, queue):
    settings = {
        **settings_dict,
        "DUPEFILTER_LIFETIME": 3600,
        "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue}",
    }
    scheduler = schedulers(settings)
    dropped = record_dropped(scheduler)
    assert scheduler.enqueue_request(Request(URL)) is True
    scheduler.enqueue_request(Request(URL, meta={META_KEY: 0}))
    scheduler.send_enqueued()
    assert len(dropped) == 1 and len(scheduler) == 1
    assert server.type(KEY) == b"zset"
    assert server.zscore(KEY, request_fingerprint(Request(URL))) < math.inf  # the first's
    assert scheduler.next_request().url == URL
    _expire(server, URL)
    # This worker met the link already: it must ask Redis, not its memory.
    scheduler.enqueue_request(Request(URL))
    scheduler.enqueue_request(Request(URL))
    scheduler.send_enqueued()
    assert len(dropped) == 2 and len(scheduler) == 1
    assert scheduler.next_request().url == URL


def test_outside_the_script_expiry_holds_too(settings_dict, server, schedulers, monkeypatch):
    monkeypatch.setattr(Base, "scripts_may_use", lambda self, *keys: False)
    scheduler = schedulers({**settings_dict, "DUPEFILTER_LIFETIME": 3600})
    for _ in range(2):
        scheduler.enqueue_request(Request(URL))
    scheduler.send_enqueued()
    assert len(scheduler) == 1 and server.type(KEY) == b"zset"
    scheduler.next_request()
    _expire(server, URL)
    scheduler.enqueue_request(Request(URL))
    scheduler.send_enqueued()
    assert len(scheduler) == 1


def test_a_crawl_keeps_its_layout(settings_dict, server, schedulers):
    server.sadd(KEY, "0" * 40)  # a crawl that started without DUPEFILTER_LIFETIME
    with pytest.raises(WrongKeyTypeError, match=r"demo:dupefilter.*holds a set"):
        schedulers({**settings_dict, "DUPEFILTER_LIFETIME": 60})


def _expired_worker(url, worker, results):
    df = RFPDupeFilter(redis.Redis.from_url(url), KEY, expiry=Expiry(60_000))
    new = [i for i in range(300) if not df.request_seen(Request(f"http://example.com/{i}"))]
    results.put(new)


def test_an_expired_fingerprint_is_new_once_across_workers(server, redis_url):
    urls = [f"http://example.com/{i}" for i in range(300)]
    server.zadd(KEY, {request_fingerprint(Request(url)): 1 for url in urls})  # long expired
    reports = results_of_processes(_expired_worker, [(redis_url, w) for w in range(4)])
    assert sorted(i for report in reports for i in report) == list(range(300))


# -- the lean filter: generations of buckets ----------------------------------------------


def _wait_new_again(df, url, deadline_s=30.0) -> None:
    end = time.monotonic() + deadline_s
    while df.request_seen(Request(url)):
        assert time.monotonic() < end, f"{url} never expired"
        time.sleep(0.02)


def test_the_lean_filter_expires_fingerprints_by_generations(settings_dict, server):
    df = LeanDupeFilter.from_spider(make_spider({**settings_dict, "DUPEFILTER_LIFETIME": 1}))
    start = _server_ms(server)
    assert df.request_seen(Request(URL)) is False
    assert df.request_seen(Request(URL, meta={META_KEY: None})) is True  # alive: not again
    assert df.request_seen(Request("http://example.com/kept", meta={META_KEY: None})) is False
    generations = [k for k in server.keys("demo:dupefilter:lean:g*")]
    assert len(generations) == 1 and 0 < server.pttl(generations[0]) <= 1500
    _wait_new_again(df, URL)
    assert _server_ms(server) >= start + 1000  # not before its lifetime
    assert df.request_seen(Request("http://example.com/kept")) is True  # kept forever
    assert int(server.hget("demo:dupefilter:lean", "lifetime_ms")) == 1000


def test_the_lean_filter_cuts_time_as_stored(settings_dict, server, caplog):
    LeanDupeFilter.from_spider(make_spider({**settings_dict, "DUPEFILTER_LIFETIME": 60}))
    other = LeanDupeFilter.from_spider(make_spider({**settings_dict, "DUPEFILTER_LIFETIME": 1}))
    first = LeanDupeFilter.from_spider(make_spider({**settings_dict, "DUPEFILTER_LIFETIME": 60}))
    first.request_seen(Request(URL))
    assert other.request_seen(Request(URL)) is True
    assert other.generations.lifetime_ms == 60_000 and "created with 60000 ms" in caplog.text


def test_lean_push_scripts_honour_expiry(settings_dict, server, schedulers):
    settings = {
        **settings_dict,
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.LeanDupeFilter",
        "DUPEFILTER_LIFETIME": 1,
    }
    scheduler = schedulers(settings)
    dropped = record_dropped(scheduler)
    for _ in range(2):
        scheduler.enqueue_request(Request(URL))
    scheduler.send_enqueued()
    assert len(dropped) == 1 and len(scheduler) == 1
    assert scheduler.next_request().url == URL
    end = time.monotonic() + 30
    while not len(scheduler):
        assert time.monotonic() < end, "never new again"
        scheduler.enqueue_request(Request(URL))
        scheduler.send_enqueued()
        time.sleep(0.05)
    assert scheduler.next_request().url == URL


def _lean_worker(url, worker, results):
    df = LeanDupeFilter(redis.Redis.from_url(url), KEY, capacity=10_000, expiry=Expiry(60_000))
    new = [i for i in range(300) if not df.request_seen(Request(f"http://example.com/{i}"))]
    results.put(new)


def test_lean_fingerprints_are_new_once_across_workers(server, redis_url):
    reports = results_of_processes(_lean_worker, [(redis_url, w) for w in range(4)])
    assert sorted(i for report in reports for i in report) == list(range(300))
