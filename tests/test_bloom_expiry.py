"""The Bloom filter's fingerprints that expire (DUPEFILTER_LIFETIME, issue 27.1): time
generations that Redis drops whole, chosen by the server's clock; seen within the lifetime,
new after it (once across workers), under the push scripts and outside them."""

from __future__ import annotations

import hashlib
import time

import pytest
import redis
from scrapy import Request

from helpers import make_spider, record_dropped, results_of_processes
from scrapy_redis.core.lifetime import META_KEY, Expiry
from scrapy_redis.dupefilter import BloomDupeFilter, request_fingerprint
from scrapy_redis.dupefilters.bloom_expiry import GENERATIONS, generation_layer
from scrapy_redis.dupefilters.bloom_layout import BloomLayout
from scrapy_redis.exceptions import ConfigurationError
from scrapy_redis.queues.base import Base
from scrapy_redis.store.keys import bloom_generation_key
from test_bloom_dupefilter import reference_bits, set_bits

KEY = "demo:dupefilter"
URL = "http://example.com/a"
BLOOM = "scrapy_redis.dupefilter.BloomDupeFilter"


def _settings(settings_dict, lifetime, **extra):
    return {
        **settings_dict,
        "DUPEFILTER_CLASS": BLOOM,
        "BLOOMFILTER_CAPACITY": 10_000,
        "BLOOMFILTER_ERROR_RATE": 0.001,
        "DUPEFILTER_LIFETIME": lifetime,
        **extra,
    }


def _bloom(settings_dict, lifetime, **extra) -> BloomDupeFilter:
    return BloomDupeFilter.from_spider(make_spider(_settings(settings_dict, lifetime, **extra)))


def _digests(count: int, seed: str) -> list[str]:
    return [hashlib.sha1(f"{seed}{i}".encode()).hexdigest() for i in range(count)]


def _server_ms(server) -> int:
    seconds, micros = server.time()
    return seconds * 1000 + micros // 1000


def _generation_keys(server) -> list[bytes]:
    return sorted(server.scan_iter(match=f"{KEY}:bloom:t*", count=1000))


def _when_new_again(server, is_seen, deadline_s: float = 30.0) -> tuple[int, int]:
    """Poll ``is_seen()`` until it answers False: the server's time before the last call
    that answered True, and after the call that answered False."""
    end = time.monotonic() + deadline_s
    last_seen = _server_ms(server)
    while True:
        before = _server_ms(server)
        if not is_seen():
            return last_seen, _server_ms(server)
        last_seen = before
        assert time.monotonic() < end, "never new again"
        time.sleep(0.01)


def test_a_url_is_seen_within_its_lifetime_and_new_after_it(settings_dict, server):
    df = _bloom(settings_dict, 1)
    before = _server_ms(server)
    assert df.request_seen(Request(URL)) is False
    after = _server_ms(server)
    assert df.request_seen(Request(URL)) is True
    assert df.request_seen(Request("http://example.com/other")) is False
    last_seen, new_at = _when_new_again(server, lambda: df.request_seen(Request(URL)))
    span = 1000 // GENERATIONS
    assert new_at >= before + 1000  # never before its lifetime...
    assert last_seen < after + 1000 + span  # ...nor seen past it plus one span
    assert df.request_seen(Request(URL)) is True  # recorded again


def test_no_generation_outlives_lifetime_plus_a_span(settings_dict, server):
    df = _bloom(settings_dict, 2)
    df.seen_many(_digests(300, "in"))
    df.request_seen(Request(URL, meta={META_KEY: 0.5}))
    keys = _generation_keys(server)
    assert len(keys) > 2  # counts and blocks, of two generations
    for key in keys:
        assert 0 < server.pttl(key) <= 2000 + 1000, key
    assert int(server.hget(KEY, "lifetime_ms")) == 2000
    deadline = time.monotonic() + 30
    while _generation_keys(server):  # Redis drops them whole: nothing left behind
        assert time.monotonic() < deadline, "generations left"
        time.sleep(0.05)


def test_a_request_gives_its_own_lifetime_rounded_up_to_a_span(settings_dict, server):
    df = _bloom(settings_dict, 4)
    short, forever = "http://example.com/short", "http://example.com/forever"
    before = _server_ms(server)
    assert df.request_seen(Request(short, meta={META_KEY: 0.3})) is False
    assert df.request_seen(Request(forever, meta={META_KEY: None})) is False
    assert df.request_seen(Request(URL, meta={META_KEY: 3600})) is False
    after = _server_ms(server)
    last_seen, new_at = _when_new_again(server, lambda: df.request_seen(Request(short)))
    assert before + 300 <= new_at and last_seen < after + 300 + 2000
    assert df.request_seen(Request(forever)) is True  # forever and 3600 s: cut to 4 s
    assert df.request_seen(Request(URL)) is True
    fingerprints = [request_fingerprint(Request(u)) for u in (forever, URL)]
    _, new_at = _when_new_again(server, lambda: any(df.seen_many(fingerprints)))
    assert new_at <= after + 4000 + 2000 + 5000  # cut: not kept an hour


def test_the_generations_are_sized_for_the_rate_and_stated(settings_dict, server):
    df = _bloom(settings_dict, 60)
    layer = generation_layer(BloomLayout(10_000, 0.001))
    assert layer.capacity == 10_000 and layer.error_rate == pytest.approx(0.9 * 0.001 / 3)
    df.open()
    assert df.capacity() == 10_000
    df.seen_many(_digests(1000, "in"))
    assert df.count() == 1000


def test_false_positives_stay_under_the_setting_with_every_generation_full(settings_dict, server):
    """Each of the three live generations filled to its capacity (lifetimes that put
    fingerprints in each); new fingerprints checked against their bits as documented
    (computed here): at most the configured rate are taken for seen."""
    df = _bloom(settings_dict, 3600, BLOOMFILTER_CAPACITY=4000, BLOOMFILTER_ERROR_RATE=0.01)
    span = 3600_000 // GENERATIONS
    for n, lifetime in enumerate((3600_000, 3600_000 - span, 1000)):
        fingerprints = _digests(4000, f"gen{n}")
        assert sum(df.seen_expiring(fingerprints, [lifetime] * 4000)) <= 0.01 * 4000
    generations = {k.split(b":")[3].decode() for k in _generation_keys(server)}
    assert len(generations) == 3 and df.count() <= 3 * 4000
    layer = df.time_generations.layer
    blocks = {
        (g, b): set_bits(server, f"{KEY}:bloom:{g}:{b}")
        for g in generations
        for b in range(layer.blocks)
    }
    fresh = _digests(20_000, "fresh")
    false_positives = 0
    for digest in fresh:
        block, bits = reference_bits(digest, 0, layer)
        false_positives += any(bits <= blocks[g, block] for g in generations)
    assert 0 < false_positives / 20_000 <= 0.01


def test_a_generation_past_its_capacity_is_reported(settings_dict, server, caplog):
    df = _bloom(settings_dict, 60, BLOOMFILTER_CAPACITY=100)
    df.seen_many(_digests(150, "in"))
    assert df.generations_fill() > 1.4
    assert "a generation holds 15" in caplog.text and "past its capacity of 100" in caplog.text


def _racer(url, seed, results):
    df = BloomDupeFilter(
        redis.Redis.from_url(url), KEY, layout=BloomLayout(10_000, 0.001), expiry=Expiry(60_000)
    )
    new = [i for i in range(300) if not df.request_seen(Request(f"http://example.com/{i}"))]
    results.put(new)


def test_a_url_due_again_is_new_once_across_workers(server, redis_url):
    df = BloomDupeFilter(server, KEY, layout=BloomLayout(10_000, 0.001), expiry=Expiry(60_000))
    urls = [f"http://example.com/{i}" for i in range(300)]
    assert df.seen_many([request_fingerprint(Request(u)) for u in urls]) == [False] * 300
    assert df.seen_many([request_fingerprint(Request(u)) for u in urls]) == [True] * 300
    server.delete(*_generation_keys(server))  # as Redis does once the lifetime is over
    reports = results_of_processes(_racer, [(redis_url, w) for w in range(4)])
    assert sorted(i for report in reports for i in report) == list(range(300))


def test_inf_is_refused(settings_dict, server):
    with pytest.raises(ValueError, match="BloomDupeFilter needs DUPEFILTER_LIFETIME in seconds"):
        _bloom(settings_dict, "inf")


def test_a_filter_keeps_its_kind_and_its_lifetime(settings_dict, server, caplog):
    kept = _bloom(settings_dict, 0)
    kept.request_seen(Request(URL))
    with pytest.raises(ConfigurationError, match="made without DUPEFILTER_LIFETIME"):
        _bloom(settings_dict, 60).request_seen(Request(URL))
    kept.clear()
    first = _bloom(settings_dict, 60)
    assert first.request_seen(Request(URL)) is False
    with pytest.raises(ConfigurationError, match="made with DUPEFILTER_LIFETIME"):
        _bloom(settings_dict, 0).request_seen(Request(URL))
    with pytest.raises(ConfigurationError, match="generation_layer"):
        _bloom(settings_dict, 60, BLOOMFILTER_CAPACITY=99).request_seen(Request(URL))
    other = _bloom(settings_dict, 1)
    assert other.request_seen(Request(URL)) is True
    assert other.time_generations.lifetime_ms == 60_000 and "created with 60000 ms" in caplog.text


def test_clear_deletes_the_live_generations(settings_dict, server):
    df = _bloom(settings_dict, 60)
    df.seen_many(_digests(300, "in"))
    assert _generation_keys(server)
    _bloom(settings_dict, 0).clear()  # whatever the settings of who clears it
    assert _generation_keys(server) == [] and not server.exists(KEY)


# -- under the scheduler (the push scripts) -----------------------------------------------


def _enqueue_until_new(scheduler, url: str) -> None:
    end = time.monotonic() + 30
    while not len(scheduler):
        assert time.monotonic() < end, "never new again"
        scheduler.enqueue_request(Request(url))
        scheduler.send_enqueued()
        time.sleep(0.05)


def test_a_batch_that_fails_on_a_later_generation_records_nothing(settings_dict, server):
    """The blocks of the later generations of the batch planted by hand (another type):
    the call fails before any bit is set, so the fingerprint whose generation comes first
    (the live one) is still new."""
    df = _bloom(settings_dict, 3600)
    first, later = (request_fingerprint(Request(u)) for u in (URL, "http://example.com/b"))
    _, keys, _ = df._generation_keys([first, later])  # k0 = live - 1 .. live + G + 1
    width = len(keys) // (GENERATIONS + 3)  # a count, then the batch's blocks
    for index in range(2 * width, len(keys)):  # live + 1 .. (the later one: live + G)
        if index % width:
            server.rpush(keys[index], "planted")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        df.seen_expiring([first, later], [1, 0])
    assert df.seen_expiring([first], [1]) == [False]


@pytest.mark.parametrize("queue", ["PriorityQueue", "FifoQueue"])
def test_push_scripts_honour_expiry(settings_dict, server, schedulers, queue):
    queue_class = f"scrapy_redis.queue.{queue}"
    scheduler = schedulers(_settings(settings_dict, 1, SCHEDULER_QUEUE_CLASS=queue_class))
    dropped = record_dropped(scheduler)
    for _ in range(2):
        scheduler.enqueue_request(Request(URL))
    scheduler.enqueue_request(Request("http://example.com/kept", meta={META_KEY: 3600}))
    scheduler.send_enqueued()
    assert len(dropped) == 1 and len(scheduler) == 2
    assert {scheduler.next_request().url for _ in range(2)} == {URL, "http://example.com/kept"}
    assert server.type(KEY) == b"hash" and _generation_keys(server)
    scheduler.enqueue_request(Request(URL))
    scheduler.send_enqueued()
    assert len(dropped) == 2  # alive: a duplicate
    _enqueue_until_new(scheduler, URL)
    assert scheduler.next_request().url == URL


def test_outside_the_script_expiry_holds_too(settings_dict, server, schedulers, monkeypatch):
    monkeypatch.setattr(Base, "scripts_may_use", lambda self, *keys: False)
    scheduler = schedulers(_settings(settings_dict, 1))
    for _ in range(2):
        scheduler.enqueue_request(Request(URL))
    scheduler.send_enqueued()
    assert len(scheduler) == 1 and _generation_keys(server)
    scheduler.next_request()
    _enqueue_until_new(scheduler, URL)
    assert scheduler.next_request().url == URL


# -- on RedisBloom: a BF filter per generation ----------------------------------------------


def _module_settings(redisbloom_server, lifetime, **extra):
    return _settings({"REDIS_URL": redisbloom_server.url}, lifetime, **extra)


def test_on_redisbloom_each_generation_is_a_bf_filter_that_expires(redisbloom_server, bloom_server):
    settings = _module_settings(redisbloom_server, 1)
    df = BloomDupeFilter.from_spider(make_spider(settings))
    before = _server_ms(bloom_server)
    assert df.seen_many([request_fingerprint(Request(URL))] * 2) == [False, True]
    after = _server_ms(bloom_server)
    assert df.backend == "redisbloom" and bloom_server.hget(KEY, "backend") == b"redisbloom"
    keys = _generation_keys(bloom_server)
    assert [bloom_server.type(k) for k in keys] == [b"MBbloom--"]
    assert 0 < bloom_server.pttl(keys[0]) <= 1500
    assert df.count() == 1 and df.capacity() == 10_000
    last_seen, new_at = _when_new_again(bloom_server, lambda: df.request_seen(Request(URL)))
    assert new_at >= before + 1000 and last_seen < after + 1500


def _module_racer(url, seed, results):
    df = BloomDupeFilter(
        redis.Redis.from_url(url), KEY, layout=BloomLayout(10_000, 0.001), expiry=Expiry(60_000)
    )
    new = [i for i in range(300) if not df.request_seen(Request(f"http://example.com/{i}"))]
    results.put(new)


def test_on_redisbloom_a_url_due_again_is_new_once_across_workers(redisbloom_server, bloom_server):
    df = BloomDupeFilter(
        bloom_server, KEY, layout=BloomLayout(10_000, 0.001), expiry=Expiry(60_000)
    )
    urls = [request_fingerprint(Request(f"http://example.com/{i}")) for i in range(300)]
    assert df.seen_many(urls) == [False] * 300 and df.backend == "redisbloom"
    bloom_server.delete(*_generation_keys(bloom_server))  # as Redis does after the lifetime
    reports = results_of_processes(_module_racer, [(redisbloom_server.url, w) for w in range(4)])
    assert sorted(i for report in reports for i in report) == list(range(300))


def test_on_redisbloom_push_scripts_honour_expiry(redisbloom_server, bloom_server, schedulers):
    scheduler = schedulers(_module_settings(redisbloom_server, 1))
    dropped = record_dropped(scheduler)
    for _ in range(2):
        scheduler.enqueue_request(Request(URL))
    scheduler.send_enqueued()
    assert len(dropped) == 1 and len(scheduler) == 1
    assert scheduler.next_request().url == URL
    assert bloom_server.type(_generation_keys(bloom_server)[0]) == b"MBbloom--"
    _enqueue_until_new(scheduler, URL)
    assert scheduler.next_request().url == URL


def test_on_redisbloom_the_fill_check_is_one_round_trip(redisbloom_server, bloom_server):
    """The fill (the stats, the warning past capacity) reads every live generation's
    BF.INFO in one pipeline, not an EXISTS and a BF.INFO each."""
    from helpers import round_trips

    df = BloomDupeFilter.from_spider(make_spider(_module_settings(redisbloom_server, 60)))
    assert df.seen_many(_digests(30, "fill")) == [False] * 30
    assert df.backend == "redisbloom"
    with round_trips() as sent:
        fill = df.generations_fill()
    assert len(sent) == 1
    assert fill == round(30 / df.time_generations.layer.capacity, 4)
    assert sum(df.generation_counts().values()) == 30


def test_a_filter_keeps_its_backend(redisbloom_server, bloom_server):
    lua = BloomDupeFilter.from_spider(
        make_spider(_module_settings(redisbloom_server, 60, BLOOMFILTER_BACKEND="lua"))
    )
    assert lua.request_seen(Request(URL)) is False
    auto = BloomDupeFilter.from_spider(make_spider(_module_settings(redisbloom_server, 60)))
    assert auto.request_seen(Request(URL)) is True and auto.backend == "lua"
    forced = _module_settings(redisbloom_server, 60, BLOOMFILTER_BACKEND="redisbloom")
    with pytest.raises(ConfigurationError, match="BLOOMFILTER_BACKEND gives 'redisbloom'"):
        BloomDupeFilter.from_spider(make_spider(forced)).request_seen(Request(URL))
    auto.clear()
    assert _generation_keys(bloom_server) == []
    plain = BloomDupeFilter.from_spider(make_spider(_module_settings(redisbloom_server, 0)))
    assert plain.request_seen(Request(URL)) is False and plain.backend == "redisbloom"
    with pytest.raises(ConfigurationError, match="made without DUPEFILTER_LIFETIME"):
        BloomDupeFilter.from_spider(make_spider(forced)).request_seen(Request(URL))
    plain.clear()
    module = BloomDupeFilter.from_spider(make_spider(forced))
    assert module.request_seen(Request(URL)) is False and module.backend == "redisbloom"
    module.clear()
    assert _generation_keys(bloom_server) == [] and not bloom_server.exists(KEY)


# -- a stale clock estimate, values planted by hand ----------------------------------------


def _off_by(df, spans: int) -> None:
    """Make ``df``'s estimate of the server's clock ``spans`` windows off."""
    clock = df._clock
    assert clock is not None
    clock._offset_ms += spans * df.time_generations.span_ms


def _clock_is_right(df, server) -> bool:
    seconds, micros = server.time()
    return abs(df._clock.now_ms() - (seconds * 1000 + micros // 1000)) < 500


@pytest.mark.parametrize("off_by_spans", [-3, 2])
def test_a_clock_estimate_off_by_windows_reads_the_clock_again(settings_dict, server, off_by_spans):
    """The script refuses generations that are not the live ones ("stale", nothing
    written): the client reads the server's clock and sends again."""
    df = _bloom(settings_dict, 60)
    assert df.request_seen(Request(URL)) is False
    _off_by(df, off_by_spans)
    assert df.request_seen(Request(URL)) is True
    assert df.request_seen(Request("http://example.com/b")) is False
    assert _clock_is_right(df, server)


@pytest.mark.parametrize("off_by_spans", [-3, 2])
def test_a_push_with_a_clock_estimate_off_reads_the_clock_again(
    settings_dict, server, schedulers, off_by_spans
):
    scheduler = schedulers(_settings(settings_dict, 60))
    dropped = record_dropped(scheduler)
    scheduler.enqueue_request(Request(URL))
    assert scheduler.send_enqueued()
    _off_by(scheduler.df, off_by_spans)
    scheduler.enqueue_request(Request(URL))
    scheduler.enqueue_request(Request("http://example.com/b"))
    scheduler.send_enqueued()
    assert len(dropped) == 1 and len(scheduler) == 2
    assert _clock_is_right(scheduler.df, server)


def test_on_redisbloom_a_clock_estimate_off_reads_the_clock_again(redisbloom_server, bloom_server):
    df = BloomDupeFilter.from_spider(make_spider(_module_settings(redisbloom_server, 60)))
    assert df.request_seen(Request(URL)) is False and df.backend == "redisbloom"
    _off_by(df, 2)
    assert df.request_seen(Request(URL)) is True
    assert _clock_is_right(df, bloom_server)


def test_counts_planted_by_hand_are_no_crash(settings_dict, server, caplog):
    df = _bloom(settings_dict, 60)
    df.fill_check_every = 1  # the fill (the counts) read at every batch
    assert df.request_seen(Request(URL)) is False
    for k in df._live_generations():
        server.set(bloom_generation_key(KEY, k, False), "not a count")
    assert df.request_seen(Request("http://example.com/b")) is False
    assert df.request_seen(Request(URL)) is True
    assert df.generations_fill() >= 0
    assert sum("not an integer" in r.getMessage() for r in caplog.records) == 1  # once


@pytest.mark.parametrize(
    "planted",
    [{"lifetime_ms": "soon"}, {"generation_layer": "a,b"}, {"generation_layer": "1,2,3,x"}],
)
def test_clear_with_a_meta_hash_planted_by_hand_is_no_crash(settings_dict, server, planted):
    df = _bloom(settings_dict, 60)
    df.seen_many(_digests(10, "in"))
    server.hset(KEY, mapping=planted)
    _bloom(settings_dict, 0).clear()
    assert not server.exists(KEY)
