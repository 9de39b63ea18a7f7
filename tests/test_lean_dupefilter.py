"""LeanDupeFilter: exact dedup in intset buckets, on a real redis-server."""

from __future__ import annotations

import json
import logging
import random
from collections import Counter

import pytest
import redis
from scrapy import Request
from scrapy.core.scheduler import Scheduler as ScrapyScheduler
from scrapy.utils.test import get_crawler

from helpers import DemoSpider, make_spider, results_of_processes
from scrapy_redis.dupefilter import LeanDupeFilter, RFPDupeFilter, request_fingerprint
from scrapy_redis.dupefilters.lean_layout import LeanLayout, layout_for, target_fill
from scrapy_redis.store.scripts import script

LEAN = "scrapy_redis.dupefilter.LeanDupeFilter"
INT32 = range(-(2**31), 2**31)


def _lean(settings_dict, **overrides):
    spider = make_spider({**settings_dict, "DUPEFILTER_CLASS": LEAN, **overrides})
    return LeanDupeFilter.from_spider(spider), spider


def _fingerprints(count, seed=14):
    rnd = random.Random(seed)
    return [f"{rnd.getrandbits(160):040x}" for _ in range(count)]


def _encodings(server, keys):
    pipe = server.pipeline(transaction=False)
    for key in keys:
        pipe.object("encoding", key)
    return [encoding for encoding in pipe.execute() if encoding is not None]


# -- layout --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "capacity, bucket_bits", [(1000, 4), (10**6, 12), (10**7, 15), (10**8, 18), (10**9, 22)]
)
def test_bucket_count_keeps_buckets_a_few_hundred_full_at_capacity(capacity, bucket_bits):
    layout = layout_for(capacity)
    assert layout.bucket_bits == bucket_bits
    if capacity > 10**4:  # not at the 16-bucket floor
        assert target_fill(512) // 2 < capacity / layout.buckets <= target_fill(512) < 512


def test_a_lower_intset_limit_gives_more_buckets():
    assert target_fill(128) < 128
    assert layout_for(10**7, 128).bucket_bits > layout_for(10**7, 512).bucket_bits


def test_locate_cuts_the_top_bits_into_bucket_and_int32_member():
    layout = LeanLayout(bucket_bits=12, capacity=10**6)
    assert layout.locate("f" * 40) == (4095, 2**31 - 1)
    assert layout.locate("0" * 40) == (0, -(2**31))
    # bucket = top 12 bits (0xabc); member = next 32 bits (0xdef01234) - 2^31
    assert layout.locate("abcdef0123456789" + "0" * 24) == (0xABC, 0xDEF01234 - 2**31)
    assert layout.bits == 44
    assert layout.expected_collisions(10**6) == pytest.approx(10**12 / 2**45)


def test_a_fingerprint_that_is_not_hex_is_hashed_first():
    layout = layout_for(10**6)
    bucket, member = layout.locate("http://example.com/not-hex")
    assert bucket < layout.buckets and member in INT32
    assert layout.locate("http://example.com/not-hex") == (bucket, member)


# -- recording -----------------------------------------------------------------------


def test_request_seen_records_an_int32_member_in_its_bucket(settings_dict, server):
    df, _ = _lean(settings_dict, DUPEFILTER_LEAN_CAPACITY=10**6)
    request = Request("http://example.com")
    assert df.request_seen(request) is False
    assert df.request_seen(request) is True
    bucket, member = df.layout.locate(request_fingerprint(request))
    assert server.smembers(f"demo:dupefilter:lean:{bucket:03x}") == {str(member).encode()}
    assert server.hgetall("demo:dupefilter:lean") == {
        b"version": b"1",
        b"bucket_bits": b"12",
        b"member_bits": b"32",
        b"capacity": b"1000000",
        b"count": b"1",
    }
    assert not server.exists("demo:dupefilter")  # the original's set is not written


def test_a_call_sent_again_is_applied_once(settings_dict, server):
    df, _ = _lean(settings_dict)
    seen = df.seen_members([request_fingerprint(Request("http://example.com"))])
    [(index, member)] = seen.members
    keys = [df.meta_key, df.writes.key(df.key), *seen.keys]
    args = [60000, df.writes.take(), index + 1, member]
    first = script("lean_seen_add")(server, keys, args)
    again = script("lean_seen_add")(server, keys, args)  # its reply was lost: sent again
    assert first == again == [b"1", 1, 1]
    assert df.count() == 1


def test_a_million_distinct_fingerprints_are_all_new_in_intsets(settings_dict, server):
    """Exactness (no false "seen" for fingerprints distinct in their kept bits), the
    encoding of every bucket at capacity, and the memory per fingerprint."""
    df, _ = _lean(settings_dict, DUPEFILTER_LEAN_CAPACITY=10**6)
    df.batch_size = 5000
    layout = df.layout
    fingerprints, kept = [], set()
    for fingerprint in _fingerprints(10**6 + 100):
        if (cut := layout.locate(fingerprint)) not in kept and len(kept) < 10**6:
            kept.add(cut)
            fingerprints.append(fingerprint)
    before = server.info("memory")["used_memory"]
    assert all(df.record_fingerprints(fingerprints))
    per_url = (server.info("memory")["used_memory"] - before) / len(fingerprints)
    print(f"lean filter at capacity (10^6, {layout.buckets} buckets): {per_url:.2f} B/URL")
    assert df.count() == 10**6
    assert not any(df.record_fingerprints(fingerprints[::100]))
    assert df.count() == 10**6
    assert set(_encodings(server, layout.bucket_keys(df.key))) == {b"intset"}
    assert per_url < 7  # measured 4.85 (4-byte members, jemalloc rounding, key overhead)


def _lean_worker(url, worker, results):
    df = LeanDupeFilter(redis.Redis.from_url(url), "shared:dupefilter", capacity=10**4)
    new = [i for i in range(500) if not df.request_seen(Request(f"http://example.com/{i}"))]
    results.put(new)


def test_concurrent_workers_each_request_new_exactly_once(server, redis_url):
    reports = results_of_processes(_lean_worker, [(redis_url, worker) for worker in range(4)])
    new = [i for report in reports for i in report]
    assert sorted(new) == list(range(500))
    df = LeanDupeFilter(server, "shared:dupefilter")
    assert df.count() == 500
    assert sum(server.scard(key) for key in df.layout.bucket_keys(df.key)) == 500


def test_seen_members_names_each_bucket_once(settings_dict, server):
    df, _ = _lean(settings_dict)
    fingerprints = [*_fingerprints(2000), "a fingerprint of one's own"]  # hashed first
    seen = df.seen_members(fingerprints)
    assert seen.base == "demo:dupefilter"
    assert len(seen.keys) == len(set(seen.keys))
    for fingerprint, (index, member) in zip(fingerprints, seen.members, strict=True):
        bucket, expected = df.layout.locate(fingerprint)
        assert seen.keys[index] == df.layout.bucket_key(df.key, bucket)
        assert member == expected and member in INT32


def test_the_scheduler_filters_duplicates_through_request_seen(settings_dict, schedulers):
    """One request at a time (SCHEDULER_ENQUEUE_DELAY = 0): False for a duplicate."""
    scheduler = schedulers(
        {**settings_dict, "DUPEFILTER_CLASS": LEAN, "SCHEDULER_ENQUEUE_DELAY": 0}
    )
    assert type(scheduler.df) is LeanDupeFilter
    assert scheduler.enqueue_request(Request("http://example.com/a")) is True
    assert scheduler.enqueue_request(Request("http://example.com/a")) is False
    assert scheduler.df.count() == 1
    assert scheduler.stats.get_value("dupefilter/filtered") == 1


@pytest.mark.parametrize("queue", ["FifoQueue", "PriorityQueue"])
def test_the_schedulers_push_script_records_in_the_buckets(
    settings_dict, server, schedulers, queue
):
    from helpers import Calls

    settings = {
        **settings_dict,
        "DUPEFILTER_CLASS": LEAN,
        "DUPEFILTER_LEAN_CAPACITY": 100_000,
        "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue}",
    }
    scheduler = schedulers(settings)
    assert scheduler.df.layout.bucket_bits  # the layout is read (the filter's first use)
    calls = Calls(server, "evalsha", "sadd", "smismember", "type")
    urls = [f"http://example.com/{n}" for n in range(90)]
    batch = [*urls, *urls[:9]]
    for url in batch:
        scheduler.enqueue_request(Request(url))
    assert scheduler.send_enqueued()
    made = calls()
    assert made["evalsha"] == 1  # one script call: 90 new, 9 duplicates
    assert scheduler.df.count() == 90 and scheduler.stats.get_value("dupefilter/filtered") == 9
    buckets = list(server.scan_iter("demo:dupefilter:lean:*"))
    assert made["sadd"] == len(buckets)  # one SADD per bucket of the batch
    asked = scheduler.df.seen_members([request_fingerprint(Request(url)) for url in batch])
    sizes = Counter(index for index, _ in asked.members)
    # a bucket asked about one member: SADD alone answers (no SMISMEMBER, no TYPE)
    assert made["smismember"] == sum(1 for size in sizes.values() if size > 1) > 0
    assert made["type"] == {"FifoQueue": 1, "PriorityQueue": 2}[queue]  # the queue's keys only
    assert sum(server.scard(key) for key in buckets) == 90
    assert {server.object("encoding", key) for key in buckets} == {b"intset"}
    assert not server.exists("demo:dupefilter")
    assert len(list(iter(scheduler.next_request, None))) == 90


# -- what users ask for --------------------------------------------------------------


def test_forget_count_and_clear(settings_dict, server):
    df, _ = _lean(settings_dict)
    for i in range(10):
        df.request_seen(Request(f"http://example.com/{i}"))
    assert df.count() == 10
    assert df.forget("http://example.com/3") is True
    assert df.forget(Request("http://example.com/3")) is False
    assert df.count() == 9
    assert df.request_seen(Request("http://example.com/3")) is False  # re-requested
    df.clear()
    assert server.keys("demo:dupefilter:lean*") == []
    assert df.count() == 0
    assert df.request_seen(Request("http://example.com/3")) is False
    assert server.hget("demo:dupefilter:lean", "count") == b"1"


def test_clear_finds_buckets_whose_layout_was_lost(settings_dict, server):
    df, _ = _lean(settings_dict)
    df.record_fingerprints(_fingerprints(100))
    server.delete(df.meta_key)
    df.clear()
    assert server.keys("demo:dupefilter:lean*") == []


def test_stats_and_a_warning_past_capacity(settings_dict, server, caplog):
    df, spider = _lean(settings_dict, DUPEFILTER_LEAN_CAPACITY=100)
    assert df.layout.buckets == 16
    with caplog.at_level(logging.WARNING, logger="scrapy_redis.dupefilters.lean"):
        df.record_fingerprints(_fingerprints(100))
        assert caplog.records == []
        df.record_fingerprints(_fingerprints(10000, seed=2))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "past the capacity of 100" in messages[0] and "DUPEFILTER_LEAN_CAPACITY" in messages[0]
    assert "set-max-intset-entries (512)" in messages[1]
    stats = spider.crawler.stats
    assert stats.get_value("dupefilter/capacity") == 100
    assert stats.get_value("dupefilter/fill") == df.count() == 10100
    assert stats.get_value("dupefilter/largest_bucket") > 512
    assert b"hashtable" in _encodings(server, df.layout.bucket_keys(df.key))  # what it warned of


def test_other_workers_use_the_stored_layout_and_say_so(settings_dict, server, caplog):
    first, _ = _lean(settings_dict, DUPEFILTER_LEAN_CAPACITY=10**6)
    first.request_seen(Request("http://example.com"))
    with caplog.at_level(logging.WARNING, logger="scrapy_redis.dupefilters.lean"):
        second, _ = _lean(settings_dict, DUPEFILTER_LEAN_CAPACITY=10**8)
        assert second.layout == first.layout
    [message] = [r.getMessage() for r in caplog.records]
    assert "DUPEFILTER_LEAN_CAPACITY is 100000000" in message and "1000000" in message
    assert second.request_seen(Request("http://example.com")) is True


def test_layout_follows_the_servers_intset_limit(settings_dict, server):
    server.config_set("set-max-intset-entries", 128)
    try:
        df, _ = _lean(settings_dict, DUPEFILTER_LEAN_CAPACITY=10**6)
        assert df.layout == layout_for(10**6, 128) != layout_for(10**6, 512)
        assert df.intset_entries == 128
    finally:
        server.config_set("set-max-intset-entries", 512)


def test_a_server_refusing_config_is_taken_for_the_default_limit(redis_url, server):
    server.acl_setuser(
        "noconfig", enabled=True, nopass=True, keys="*", commands=["+@all", "-config"]
    )
    try:
        client = redis.Redis.from_url(redis_url, username="noconfig")
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.config_get("set-max-intset-entries")
        server.config_set("set-max-intset-entries", 128)  # not what this client can read
        df = LeanDupeFilter(client, "demo:dupefilter", capacity=10**6)
        assert df.layout == layout_for(10**6, 512)
        assert df.intset_entries == 512
    finally:
        server.config_set("set-max-intset-entries", 512)
        server.acl_deluser("noconfig")


def test_a_damaged_meta_hash_is_refused_naming_it(settings_dict, server):
    server.hset("demo:dupefilter:lean", mapping={"version": 9, "bucket_bits": 12})
    df, _ = _lean(settings_dict)
    with pytest.raises(ValueError, match="demo:dupefilter:lean"):
        df.request_seen(Request("http://example.com"))


@pytest.mark.parametrize("capacity", [0, -5, "many"])
def test_a_bad_capacity_names_the_setting(settings_dict, capacity):
    with pytest.raises(ValueError, match="DUPEFILTER_LEAN_CAPACITY"):
        LeanDupeFilter(None, "k", capacity=capacity)


def test_open_warns_of_an_existing_original_set(settings_dict, server, caplog):
    server.sadd("demo:dupefilter", request_fingerprint(Request("http://example.com")))
    df, _ = _lean(settings_dict)
    with caplog.at_level(logging.WARNING, logger="scrapy_redis.dupefilters.lean"):
        assert df.request_seen(Request("http://example.com")) is False  # opened on first use
    [message] = [r.getMessage() for r in caplog.records]
    assert "demo:dupefilter holds fingerprints of another duplicate filter" in message


def test_import_set_takes_the_default_filters_fingerprints(settings_dict, server):
    fingerprints = [request_fingerprint(Request(f"http://example.com/{i}")) for i in range(2500)]
    server.sadd("demo:dupefilter", *fingerprints)  # as RFPDupeFilter (or the original) left it
    df, _ = _lean(settings_dict)
    assert df.import_set("demo:dupefilter") == 2500
    assert df.count() == 2500
    assert df.request_seen(Request("http://example.com/7")) is True
    assert df.request_seen(Request("http://example.com/2500")) is False
    assert df.import_set("demo:dupefilter") == 0


def test_standalone_with_scrapys_scheduler(redis_url, server):
    crawler = get_crawler(DemoSpider, {"REDIS_URL": redis_url, "DUPEFILTER_CLASS": LEAN})
    scheduler = ScrapyScheduler.from_crawler(crawler)  # as the engine builds it
    df = scheduler.df
    assert isinstance(df, LeanDupeFilter) and isinstance(df, RFPDupeFilter)
    df.open()
    assert df.key.startswith("dupefilter:")
    assert df.request_seen(Request("http://example.com/1")) is False
    assert df.request_seen(Request("http://example.com/1")) is True
    assert df.count() == 1
    assert server.keys(f"{df.key}:lean:*")
    df.close("finished")
    assert server.keys("dupefilter:*") == []


def test_the_last_worker_deletes_the_buckets(settings_dict, server, schedulers):
    scheduler = schedulers(
        {**settings_dict, "DUPEFILTER_CLASS": LEAN, "SCHEDULER_ENQUEUE_DELAY": 0}
    )
    scheduler.enqueue_request(Request("http://example.com/a"))
    scheduler.close("finished")
    assert scheduler.cleared_shared_data is True
    assert server.keys("demo:dupefilter*") == []


def test_flush_on_start_deletes_the_buckets(settings_dict, server, schedulers):
    kept = {**settings_dict, "DUPEFILTER_CLASS": LEAN, "SCHEDULER_PERSIST": True}
    first = schedulers(kept)
    first.enqueue_request(Request("http://example.com/a"))
    first.close("shutdown")
    assert server.keys("demo:dupefilter:lean:*")
    second = schedulers({**kept, "SCHEDULER_FLUSH_ON_START": True})
    assert server.keys("demo:dupefilter*") == []
    second.enqueue_request(Request("http://example.com/a"))
    assert second.send_enqueued()
    assert second.next_request().url == "http://example.com/a"  # new again


# -- end to end ----------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_two_workers_crawl_every_page_once_with_the_lean_filter(server, redis_url, tmp_path):
    from test_e2e import (
        DOMAIN,
        IDLE,
        DemoSite,
        assert_each_worker_crawled,
        assert_hits,
        crawl,
        expected_hits,
        expected_pages,
        fingerprints,
    )

    pages = 300
    settings = {
        "MAX_IDLE_TIME_BEFORE_CLOSE": IDLE,
        "SCHEDULER_PERSIST": True,
        "DUPEFILTER_CLASS": LEAN,
        "DUPEFILTER_LEAN_CAPACITY": 10_000,
    }
    with DemoSite(pages=pages) as site:
        server.lpush("myspider:start_urls", json.dumps({"url": site.url}))
        workers = crawl("myspider_redis", redis_url, tmp_path, settings=settings, arguments=DOMAIN)
        expected = expected_hits(pages)
        assert_hits(site.snapshot(), expected)
        recorded = fingerprints(site, set(expected) - {"/"})  # start requests are not filtered
    assert_each_worker_crawled(workers)
    assert server.llen("myspider_redis:items") == len(expected_pages(pages))
    df = LeanDupeFilter(server, "myspider_redis:dupefilter")
    assert df.count() == len(recorded)
    assert not server.exists("myspider_redis:dupefilter")  # no hex set: buckets only
    assert all(not new for new in df.record_fingerprints(sorted(recorded)))
    assert sum(worker.stats.get("dupefilter/filtered", 0) for worker in workers) > pages


def test_without_one_script_the_count_is_kept(settings_dict, server, schedulers, monkeypatch):
    from scrapy_redis.queue import Base

    # A Redis Cluster whose buckets and queue hash to different slots: the pipeline path.
    monkeypatch.setattr(Base, "scripts_may_use", lambda self, *keys: False)
    scheduler = schedulers({**settings_dict, "DUPEFILTER_CLASS": LEAN})
    for url in ["http://example.com/a", "http://example.com/b", "http://example.com/a"]:
        scheduler.enqueue_request(Request(url))
    assert scheduler.send_enqueued()
    assert scheduler.df.count() == 2
    assert len(list(iter(scheduler.next_request, None))) == 2
