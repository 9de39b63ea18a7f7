"""Forgetting URLs (issue 27.4): the filters' forget, ``forget_requests()`` and
``scrapy redis forget`` run as a user runs it (a subprocess in example-project)."""

from __future__ import annotations

import json

import pytest
from scrapy import Request

from helpers import make_spider, scrapy_redis
from scrapy_redis.core.lifetime import Expiry
from scrapy_redis.dupefilter import BloomDupeFilter, LeanDupeFilter, RFPDupeFilter
from scrapy_redis.dupefilters.bloom import BloomForgetError
from scrapy_redis.exceptions import ScrapyRedisError
from scrapy_redis.fleet.forget import forget_requests
from scrapy_redis.queue import Candidate
from scrapy_redis.scheduling.lanes import lane_of

URLS = [f"http://example.com/{i}" for i in range(6)]


@pytest.mark.parametrize("expiry", [None, Expiry(60_000)], ids=["set", "sorted set"])
def test_the_set_filter_forgets_in_either_layout(server, expiry):
    df = RFPDupeFilter(server, "demo:dupefilter", expiry=expiry)
    for url in URLS[:3]:
        df.request_seen(Request(url))
    assert forget_requests([df], [URLS[0], Request(URLS[1]), URLS[4]]) == [True, True, False]
    assert df.request_seen(Request(URLS[0])) is False  # new again
    assert df.request_seen(Request(URLS[2])) is True  # the others not
    assert df.forget(URLS[2]) is True and df.forget(URLS[2]) is False


def test_the_lean_filter_forgets(server):
    df = LeanDupeFilter(server, "demo:dupefilter", capacity=1000)
    df.record_fingerprints([df.request_fingerprint(Request(url)) for url in URLS])
    assert forget_requests([df], URLS[:2]) == [True, True]
    assert df.count() == len(URLS) - 2
    assert df.request_seen(Request(URLS[0])) is False
    assert df.request_seen(Request(URLS[2])) is True


def test_the_lean_filter_forgets_fingerprints_that_expire(server):
    df = LeanDupeFilter(server, "demo:dupefilter", capacity=1000, expiry=Expiry(3_600_000))
    for url in URLS:
        assert df.request_seen(Request(url)) is False
    assert forget_requests([df], URLS[:2]) == [True, True]  # in their generation's bucket
    assert df.request_seen(Request(URLS[0])) is False  # new again
    assert df.request_seen(Request(URLS[2])) is True  # the others not
    plain = LeanDupeFilter(server, "demo:dupefilter", capacity=1000)  # a forget without
    assert forget_requests([plain], [URLS[3]]) == [True]  # DUPEFILTER_LIFETIME set


def test_each_fingerprint_is_forgotten_in_its_lane(server):
    lanes = [RFPDupeFilter(server, f"demo:dupefilter:{n}") for n in range(3)]
    for url in URLS:
        fingerprint = lanes[0].request_fingerprint(Request(url))
        lanes[lane_of(Candidate(fingerprint, None), 3)].request_seen(Request(url))
    assert forget_requests(lanes, URLS) == [True] * len(URLS)
    assert not any(server.exists(lane.key) for lane in lanes)


def test_the_workers_fingerprinter_is_used(settings_dict, server):
    settings = {
        **settings_dict,
        "REQUEST_FINGERPRINTER_CLASS": "scrapy.utils.request.RequestFingerprinter",
    }
    df = RFPDupeFilter.from_spider(make_spider(settings))
    df.request_seen(Request(URLS[0]))
    assert forget_requests([df], [URLS[0]]) == [True]


def test_a_bloom_filter_says_why_not_and_what_to_do(server):
    with pytest.raises(BloomForgetError, match=r"cannot forget.*push it as a start message"):
        forget_requests([BloomDupeFilter(server, "demo:dupefilter")], URLS)
    with pytest.raises(ScrapyRedisError, match="nothing to forget"):
        forget_requests([], URLS)


def test_the_command_forgets_urls_from_arguments_and_stdin(server, redis_url):
    spider = "myspider_redis"
    df = RFPDupeFilter(server, f"{spider}:dupefilter")
    for url in URLS[:3]:
        df.request_seen(Request(url))
    result = scrapy_redis(
        redis_url, "forget", spider, URLS[0], "-", stdin=f"{URLS[1]}\n\n{URLS[5]}\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"Forgot 2 of 3 URLs of {spider}.\n"
    assert result.stderr == f"not recorded: {URLS[5]}\n"
    assert server.smembers(df.key) == {df.request_fingerprint(Request(URLS[2])).encode()}
    as_json = scrapy_redis(redis_url, "forget", spider, URLS[2], URLS[3], "--json")
    assert json.loads(as_json.stdout) == {"forgotten": 1, "not_recorded": [URLS[3]]}


def test_the_command_refuses_a_bloom_filter_in_one_line(server, redis_url):
    bloom = "DUPEFILTER_CLASS=scrapy_redis.dupefilter.BloomDupeFilter"
    result = scrapy_redis(redis_url, "forget", "myspider_redis", URLS[0], "-s", bloom)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "cannot forget a URL" in result.stderr and "scrapy redis push" in result.stderr


def test_export_lists_fingerprints_that_expire_with_when(server, redis_url):
    df = RFPDupeFilter(server, "myspider_redis:dupefilter", expiry=Expiry(60_000))
    df.request_seen(Request(URLS[0]))
    df.request_seen(Request(URLS[1], meta={"dupefilter_lifetime": None}))
    result = scrapy_redis(redis_url, "export", "myspider_redis", "fingerprints")
    assert result.returncode == 0, result.stderr
    lines = sorted((json.loads(line) for line in result.stdout.splitlines()), key=str)
    expires = {line["fingerprint"]: line["expires_ms"] for line in lines}
    assert expires[df.request_fingerprint(Request(URLS[1]))] is None
    assert expires[df.request_fingerprint(Request(URLS[0]))] > server.time()[0] * 1000


def test_status_counts_fingerprints_that_expire(server, redis_url):
    df = RFPDupeFilter(server, "myspider_redis:dupefilter", expiry=Expiry(60_000))
    for url in URLS:
        df.request_seen(Request(url))
    result = scrapy_redis(redis_url, "status", "myspider_redis", "--json")
    assert result.returncode == 0, result.stderr
    (status,) = json.loads(result.stdout)["spiders"]
    assert status["fingerprints"] == len(URLS)


def test_a_running_worker_drops_what_it_remembers_once_urls_are_forgotten(
    settings_dict, server, schedulers, monkeypatch
):
    from scrapy_redis.scheduling import enqueue

    monkeypatch.setattr(enqueue, "FORGETS_EVERY", 0.0)  # look at every hit (default: 1 s)
    scheduler = schedulers(settings_dict)  # SCHEDULER_SEEN_CACHE_SIZE: on by default
    scheduler.enqueue_request(Request(URLS[0]))
    scheduler.send_enqueued()
    assert scheduler.next_request().url == URLS[0]
    assert scheduler.enqueue_request(Request(URLS[0])) is False  # remembered: no round trip
    assert forget_requests([scheduler.df], [URLS[0]]) == [True]
    assert scheduler.enqueue_request(Request(URLS[0])) is True
    scheduler.send_enqueued()
    assert scheduler.next_request().url == URLS[0]


def test_a_split_crawl_queued_per_slot_forgets_in_each_slots_lane(settings_dict, schedulers):
    from scrapy_redis.fleet.forget import crawl_slot_of

    settings = {**settings_dict, "SCHEDULER_FLEET_LIMITS": True, "SCHEDULER_SHARDS": 4}
    scheduler = schedulers(settings)
    urls = [f"http://h{n}.test/{n}" for n in range(12)]
    for url in urls:
        scheduler.enqueue_request(Request(url))
    assert scheduler.send_enqueued()
    slot_of = crawl_slot_of(scheduler.spider.crawler.settings, scheduler.spider)
    assert slot_of is not None
    assert forget_requests(scheduler.queue.filters, urls, slot_of) == [True] * len(urls)
