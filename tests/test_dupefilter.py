"""The Redis dupefilter: fingerprints, atomic check-and-add, standalone and scheduler use."""

from __future__ import annotations

import logging

import pytest
import redis
from scrapy import Request
from scrapy.core.scheduler import Scheduler as ScrapyScheduler
from scrapy.utils.test import get_crawler

from helpers import DemoSpider, make_spider, results_of_processes
from scrapy_redis.dupefilter import RFPDupeFilter, request_fingerprint
from scrapy_redis.exceptions import ScrapyRedisDeprecationWarning

# COMPAT.md 1.4: fingerprints of the original scrapy-redis >= 0.8 (w3lib 2.5).
VECTORS = [
    (Request("http://example.com"), "db723d399cb551c9ef8eca77ed8dbed4a0522b4f"),
    (Request("http://example.com/a?b=2&a=1"), "e34921d88a05be58f5d638c160d471933d9bec18"),
    (
        Request("http://example.com", method="POST", body=b"k=v"),
        "b02c876664d2f281bbac7801f003c227a1a1aed1",
    ),
    (Request("http://example.com/#frag"), "db723d399cb551c9ef8eca77ed8dbed4a0522b4f"),
]
SCRAPY_FINGERPRINTS = {
    "http://example.com": "cebe46deeab7ee5915824a38cf73ee6f7eb0aba5",
}


@pytest.mark.parametrize("request_obj, expected", VECTORS)
def test_fingerprint_vectors(request_obj, expected):
    assert request_fingerprint(request_obj) == expected


def _dupefilter(settings_dict, **overrides):
    spider = make_spider({**settings_dict, **overrides})
    return RFPDupeFilter.from_spider(spider), spider


@pytest.mark.parametrize("request_obj, expected", VECTORS)
def test_default_dupefilter_stores_original_fingerprints(
    settings_dict, server, request_obj, expected
):
    df, _ = _dupefilter(settings_dict)
    assert df.key == "demo:dupefilter"
    assert df.request_fingerprint(request_obj) == expected
    assert df.request_seen(request_obj) is False
    assert df.request_seen(request_obj) is True
    assert server.smembers("demo:dupefilter") == {expected.encode()}


def test_existing_fingerprint_set_stays_valid(settings_dict, server):
    server.sadd("demo:dupefilter", VECTORS[0][1])  # written by the original
    df, _ = _dupefilter(settings_dict)
    assert df.request_seen(Request("http://example.com/")) is True


def test_user_set_fingerprinter_is_honoured(settings_dict, server):
    df, _ = _dupefilter(
        settings_dict, REQUEST_FINGERPRINTER_CLASS="scrapy.utils.request.RequestFingerprinter"
    )
    assert (
        df.request_fingerprint(Request("http://example.com"))
        == SCRAPY_FINGERPRINTS["http://example.com"]
    )


def test_request_fingerprint_overridable(settings_dict, server):
    class ByUrl(RFPDupeFilter):
        def request_fingerprint(self, request):
            return request.url

    spider = make_spider(settings_dict)
    df = ByUrl.from_spider(spider)
    assert df.request_seen(Request("http://a.example/x")) is False
    assert df.request_seen(Request("http://a.example/x", method="POST")) is True
    assert server.smembers("demo:dupefilter") == {b"http://a.example/x"}


def test_custom_key_setting(settings_dict, server):
    df, _ = _dupefilter(settings_dict, SCHEDULER_DUPEFILTER_KEY="proj:%(spider)s:seen")
    df.request_seen(Request("http://example.com"))
    assert server.exists("proj:demo:seen")


def test_log_and_stats(settings_dict, server, caplog):
    df, spider = _dupefilter(settings_dict)
    with caplog.at_level(logging.DEBUG, logger="scrapy_redis.dupefilter"):
        for _ in range(3):
            df.log(Request("http://example.com"), spider)
    assert spider.crawler.stats.get_value("dupefilter/filtered") == 3
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "see DUPEFILTER_DEBUG to show all duplicates" in messages[0]


def test_debug_logs_every_duplicate(settings_dict, server, caplog):
    df, spider = _dupefilter(settings_dict, DUPEFILTER_DEBUG=True)
    with caplog.at_level(logging.DEBUG, logger="scrapy_redis.dupefilter"):
        for _ in range(3):
            df.log(Request("http://example.com"), spider)
    assert len(caplog.records) == 3


def test_standalone_with_scrapys_scheduler(settings_dict, server):
    """DUPEFILTER_CLASS alone, under Scrapy's own scheduler: a one-time key deleted on close."""
    settings = {
        "REDIS_URL": settings_dict["REDIS_URL"],
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    }
    crawler = get_crawler(DemoSpider, settings)
    scheduler = ScrapyScheduler.from_crawler(crawler)  # as the engine builds it
    df = scheduler.df
    assert isinstance(df, RFPDupeFilter)
    df.open()
    assert df.request_seen(Request("http://example.com/1")) is False
    assert df.request_seen(Request("http://example.com/1")) is True
    [key] = server.keys("dupefilter:*")
    assert key.decode() == df.key
    assert server.scard(key) == 1
    df.close("finished")
    assert not server.exists(key)


def test_from_settings_is_deprecated_but_works(settings_dict, server):
    from scrapy.settings import Settings

    with pytest.warns(ScrapyRedisDeprecationWarning, match="from_crawler"):
        df = RFPDupeFilter.from_settings(Settings(settings_dict))
    assert df.key.startswith("dupefilter:")
    assert df.request_seen(Request("http://example.com")) is False


def test_clear(settings_dict, server):
    df, _ = _dupefilter(settings_dict)
    df.request_seen(Request("http://example.com"))
    df.clear()
    assert not server.exists(df.key)


def _seen_worker(url, worker, results):
    df = RFPDupeFilter(redis.Redis.from_url(url), "shared:dupefilter")
    new = [i for i in range(500) if not df.request_seen(Request(f"http://example.com/{i}"))]
    results.put(new)


def test_concurrent_workers_each_request_new_exactly_once(server, redis_url):
    reports = results_of_processes(_seen_worker, [(redis_url, worker) for worker in range(4)])
    new = [i for report in reports for i in report]
    assert sorted(new) == list(range(500))
    assert server.scard("shared:dupefilter") == 500


@pytest.mark.parametrize("debug", [False, True])
def test_a_huge_duplicate_is_logged_in_a_short_line(settings_dict, server, caplog, debug):
    df, spider = _dupefilter(settings_dict, DUPEFILTER_DEBUG=debug)
    huge = Request("http://example.com/" + "a" * 1_000_000, headers={"Referer": "b" * 10**6})
    with caplog.at_level(logging.DEBUG, logger="scrapy_redis.dupefilter"):
        df.log(huge, spider)
    [message] = [r.getMessage() for r in caplog.records]
    assert len(message) < 1000 and "characters)" in message
