"""The Bloom duplicate filter on a real redis-server: its error rate at capacity and after
growing, atomic check-and-set under racing processes, its layout and its keys."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import multiprocessing
import random

import pytest
import redis
from scrapy import Request
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from helpers import DemoSpider
from lossy_proxy import LossyProxy
from scrapy_redis.dupefilter import BloomDupeFilter, request_fingerprint
from scrapy_redis.dupefilters.bloom import BloomForgetError
from scrapy_redis.dupefilters.bloom_layout import (
    BLOCK_MIN_BITS,
    FIRST_SHARE,
    BloomLayout,
    block_bytes,
    fork_layout,
    layout_from_settings,
)
from scrapy_redis.dupefilters.redisbloom import server_has_redisbloom
from scrapy_redis.exceptions import ConfigurationError, WrongKeyTypeError
from scrapy_redis.queue import Candidate, Entry, FifoQueue


def fingerprints(count: int, seed: str) -> list[str]:
    """``count`` distinct fingerprints, as the original's (SHA1 hex)."""
    return [hashlib.sha1(f"{seed}:{i}".encode()).hexdigest() for i in range(count)]


def reference_bits(digest: str, index: int, layer) -> tuple[int, set[int]]:
    """The block and bits of ``digest`` (40 hex digits) in layer number ``index``, as
    documented in bloom_layout.py, computed here independently (the scripts compute
    them: this checks them)."""
    if index == 0:
        block, source = int(digest[:12], 16) % layer.blocks, digest
    else:
        block = int(digest[32:40], 16) % layer.blocks
        source = hashlib.sha1(f"{digest}:{index}".encode()).hexdigest()
    m = layer.block_bits
    h1, h2 = int(source[12:22], 16) % m, int(source[22:32], 16) % m
    return block, {(h1 + i * h2 + (i**3 - i) // 6) % m for i in range(layer.k)}


def set_bits(server, key: str) -> set[int]:
    """The offsets of the bits set in the string ``key`` (bit 0: the first byte's highest)."""
    value = server.get(key) or b""
    return {8 * i + b for i, byte in enumerate(value) for b in range(8) if byte & (0x80 >> b)}


def block_key(generation: int, layer: int, block: int) -> str:
    return f"demo:dupefilter:bloom:{generation}:{layer}:{block}"


def bloom(server, capacity: int, error_rate: float, key: str = "demo:dupefilter", **kw):
    layout = BloomLayout(capacity, error_rate)
    return BloomDupeFilter(server, key, layout=layout, temporary=False, **kw)


def bloom_settings(redis_url, **extra):
    return {
        "REDIS_URL": redis_url,
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.BloomDupeFilter",
        **extra,
    }


# --- layout ---------------------------------------------------------------------------


def test_a_layer_is_sized_by_capacity_and_error_rate():
    layout = BloomLayout(10**8, 0.001)
    first = layout.layer(0)
    assert first.error_rate == pytest.approx(0.0007)  # most of the total: a sized filter's only
    assert first.k == 10
    assert first.bits / 10**8 == pytest.approx(15.12, rel=0.01)  # -ln(p) / ln(2)^2 bits per URL
    assert first.block_bits >= BLOCK_MIN_BITS and first.block_bits % 64 == 0
    second = layout.layer(1)  # the growth layers share the rest: 0.3 · 0.3 of it, then 0.7x
    assert (second.capacity, second.error_rate) == (15 * 10**7, pytest.approx(0.00009))
    assert layout.layer(2).error_rate == pytest.approx(0.00009 * 0.7)


def test_sized_up_front_a_filter_takes_under_2_bytes_per_url_at_0_1_percent():
    layer = BloomLayout(10**6, 0.001).layer(0)  # issue #14: at most 2.0 measured (used_memory)
    assert layer.bits / 8 / 10**6 < 1.9


def test_layers_grow_by_half_rounded_up_alike_on_every_worker():
    layout = BloomLayout(125_000, 0.001)
    capacities = [layout.layer(i).capacity for i in range(6)]
    assert capacities == [125_000, 187_500, 281_250, 421_875, 632_813, 949_219]
    assert BloomLayout(3, 0.01).layer(1).capacity == 5  # 4.5 rounded up


def test_layers_stay_few_and_their_rates_add_up_to_at_most_the_configured_one():
    layout = BloomLayout(10**6, 0.001)
    assert sum(layout.layer_rate(i) for i in range(64)) <= 0.001
    held = [sum(layout.layer(i).capacity for i in range(n)) for n in range(1, 12)]

    def layers_for(times: int) -> int:
        return next(n for n, h in enumerate(held, 1) if h >= times * 10**6)

    assert (layers_for(8), layers_for(10), layers_for(100)) == (4, 5, 10)


def test_a_filter_grown_8_times_takes_under_4_bytes_per_url():
    layout = BloomLayout(125_000, 0.001)  # issue #14: 10^6 URLs in 4 layers
    assert sum(layout.layer(i).capacity for i in range(4)) >= 10**6
    assert sum(layout.layer(i).bits for i in range(4)) / 8 / 10**6 < 2.7


def test_a_small_filter_still_has_blocks_of_8_kib():
    layer = BloomLayout(100, 0.01).layer(0)
    assert layer.blocks == 1
    assert layer.block_bits == 8 * (10 * 1024 - 16) > BLOCK_MIN_BITS  # 10 KiB allocated


@pytest.mark.parametrize("wanted", [100, 8192, 10_000, 65_520, 65_536, 300_000])
def test_blocks_fill_their_allocation(wanted):
    size = block_bytes(wanted)
    allocated = size + 16  # jemalloc: 4 size classes per power of two
    step = 2 ** (max((allocated - 1).bit_length() - 3, 4))
    assert wanted <= size and allocated % step == 0 and allocated - step < wanted + 16


def test_the_forks_settings_map_to_its_bits_and_hashes():
    layout = layout_from_settings(Settings({"BLOOMFILTER_BIT": 30, "BLOOMFILTER_HASH_NUMBER": 6}))
    first = layout.layer(0)
    assert first.k == 6  # the fork's filter: k hashes, 2**BIT bits (in blocks that fill
    assert 2**30 <= first.bits <= 1.001 * 2**30  # their memory allocation)
    assert first.blocks == 2049 and first.block_bits == 8 * (2**16 - 16)
    # its rate, 2**-6, is the first layer's share of the chain's bound
    assert first.error_rate == 2**-6 == pytest.approx(FIRST_SHARE * layout.error_rate)
    assert layout.error_rate == pytest.approx(0.0223, abs=1e-4)
    assert sum(layout.layer(i).error_rate for i in range(64)) <= layout.error_rate
    assert layout == fork_layout(30, 6)
    assert layout_from_settings(Settings({"BLOOMFILTER_BIT": 25})) == fork_layout(25, 6)


def test_our_settings_win_over_the_forks():
    settings = Settings(
        {"BLOOMFILTER_BIT": 30, "BLOOMFILTER_CAPACITY": 5000, "BLOOMFILTER_ERROR_RATE": 0.01}
    )
    assert layout_from_settings(settings) == BloomLayout(5000, 0.01)


@pytest.mark.parametrize(
    "settings",
    [{"BLOOMFILTER_CAPACITY": 0}, {"BLOOMFILTER_ERROR_RATE": 1.5}, {"BLOOMFILTER_BIT": 60}],
)
def test_bad_sizes_are_refused_naming_the_setting(settings):
    with pytest.raises(ConfigurationError, match=next(iter(settings))):
        layout_from_settings(Settings(settings))


# --- error rates (measured) -------------------------------------------------------------


def test_false_positive_rate_at_capacity(server):
    dupefilter = bloom(server, 10**5, 0.01)
    # false positives while it fills: fewer than at capacity
    assert sum(dupefilter.seen_many(fingerprints(10**5, "in"))) < 0.005 * 10**5
    unseen = fingerprints(10**5, "out")
    rate = sum(dupefilter.seen_many(unseen)) / len(unseen)
    assert rate <= 1.25 * 0.01
    # The first layer is built for 70 % of the configured rate, with a few more bits than
    # needed (whole blocks): the textbook rate of its geometry, (1 - e^(-kn/m))^k.
    layer = dupefilter.layers[0]
    expected = (1 - math.exp(-layer.k * 10**5 / layer.bits)) ** layer.k
    assert 0.0035 < expected <= 0.007
    assert 0.8 * expected <= rate <= 1.25 * expected  # 10^5 samples: sigma ~ 5 % of it


def test_growth_past_capacity_keeps_the_configured_rate(server, caplog):
    stats = get_crawler(DemoSpider).stats
    dupefilter = bloom(server, 10**4, 0.01, stats=stats)
    with caplog.at_level(logging.WARNING):
        new = 4 * 10**4 - sum(dupefilter.seen_many(fingerprints(4 * 10**4, "in")))
    assert len(dupefilter.layers) == 3  # 10^4 + 1.5·10^4 + 2.25·10^4
    assert "past its capacity" in caplog.text
    assert stats.get_value("dupefilter/layers") == 3
    assert stats.get_value("dupefilter/capacity") == 47_500
    assert stats.get_value("dupefilter/fill") == pytest.approx(new / 47_500, abs=1e-4)
    assert dupefilter.count() == new >= 0.99 * 4 * 10**4
    unseen = fingerprints(10**5, "out")
    assert sum(dupefilter.seen_many(unseen)) / len(unseen) <= 0.01


def test_every_fingerprint_seen_once_is_seen_again_in_every_layer(server):
    dupefilter = bloom(server, 1000, 0.01)
    inserted = fingerprints(5000, "in")
    dupefilter.seen_many(inserted)
    assert len(dupefilter.layers) == 4  # 1000 + 1500 + 2250 + 3375
    assert all(dupefilter.seen_many(inserted))  # no false negatives, whatever the layer


# --- bit positions (computed by the scripts) -------------------------------------------


def _record_one(server, dupefilter, fingerprint: str, path: str) -> None:
    if path == "seen_many":
        assert dupefilter.seen_many([fingerprint]) == [False]
    else:
        requests = FifoQueue(server, DemoSpider(), "demo:requests")
        assert requests.push_new([Candidate(fingerprint, Entry(b"e"))], dupefilter) == [True]


@pytest.mark.parametrize("path", ["seen_many", "push script"])
def test_the_scripts_set_the_documented_bits(server, path):
    dupefilter = bloom(server, 10**5, 0.01)
    digests = fingerprints(3, "one")
    for digest in digests:
        _record_one(server, dupefilter, digest, path)
    layer = dupefilter.layers[0]
    assert layer.blocks == 8 and layer.k == 7
    expected: dict[int, set[int]] = {}
    for digest in digests:
        block, bits = reference_bits(digest, 0, layer)
        assert len(bits) == layer.k
        expected[block] = expected.get(block, set()) | bits
    written = {k.decode() for k in server.keys("demo:dupefilter:bloom:1:0:*")}
    assert written == {block_key(1, 0, block) for block in expected}
    for block, bits in expected.items():
        assert set_bits(server, block_key(1, 0, block)) == bits


@pytest.mark.parametrize("path", ["seen_many", "push script"])
def test_a_grown_filters_new_layer_takes_bits_of_its_own(server, path):
    dupefilter = bloom(server, 20000, 0.01)
    dupefilter.seen_many(fingerprints(20200, "fill"))  # false positives are not counted
    assert len(dupefilter.layers) == 2
    layer = dupefilter.layers[1]
    assert layer.blocks == 4  # computed per fingerprint (more than a quarter of 10)
    before = {b: set_bits(server, block_key(1, 1, b)) for b in range(layer.blocks)}
    later = fingerprints(10, "later")
    for digest in later:
        _record_one(server, dupefilter, digest, path)
    expected: dict[int, set[int]] = {b: set() for b in range(layer.blocks)}
    for digest in later:
        block, bits = reference_bits(digest, 1, layer)
        expected[block] |= bits
        assert bits != reference_bits(digest, 0, dupefilter.layers[0])[1]  # not layer 0's
    assert sum(1 for bits in expected.values() if bits) > 1
    for block, bits in expected.items():
        after = set_bits(server, block_key(1, 1, block))
        assert bits <= after and after - before[block] == bits - before[block]


def test_fingerprints_of_another_form_are_hashed_first(server):
    dupefilter = bloom(server, 10**5, 0.01)
    # a fingerprinter's own: not 40 lowercase hex digits (upper case, longer, free text)
    own = ["my-fingerprint", "A" * 40, "ab" * 32]
    assert dupefilter.seen_many([own[0], own[0], *own[1:]]) == [False, True, False, False]
    for fingerprint in own:
        digest = hashlib.sha1(fingerprint.encode()).hexdigest()
        block, bits = reference_bits(digest, 0, dupefilter.layers[0])
        assert bits <= set_bits(server, block_key(1, 0, block))
        assert dupefilter.seen_many([digest]) == [True]  # the same bits


def test_a_call_that_names_no_key_for_a_block_is_refused_writing_nothing(server):
    """Every key a script touches is declared: a call whose blocks (worked out by the
    worker) miss the block the script finds for a fingerprint fails before any write."""
    dupefilter = bloom(server, 10**5, 0.01)
    dupefilter.open()
    layer = dupefilter.layers[0]
    ours, other = fingerprints(1, "ours")[0], None
    for candidate in fingerprints(50, "other"):
        if reference_bits(candidate, 0, layer)[0] != reference_bits(ours, 0, layer)[0]:
            other = candidate
            break
    assert other is not None
    named = dupefilter.seen_bits([other])  # the keys of another fingerprint's block
    assert named is not None
    wrong = dataclasses.replace(named, members=[ours])

    class Misnamed(BloomDupeFilter):
        def seen_bits(self, fingerprints):
            return wrong

    misnamed = Misnamed(server, "demo:dupefilter", layout=dupefilter.layout, temporary=False)
    requests = FifoQueue(server, DemoSpider(), "demo:requests")
    with pytest.raises(redis.ResponseError, match="not declared"):
        requests.push_new([Candidate(ours, Entry(b"e"))], misnamed)
    assert server.keys("demo:dupefilter:bloom:1:*") == []
    assert server.llen("demo:requests") == 0 and dupefilter.count() == 0


# --- atomicity -------------------------------------------------------------------------


def _race(url: str, capacity: int, seed: int, queue, start) -> None:
    client = redis.Redis.from_url(url)
    dupefilter = bloom(client, capacity, 0.001)
    mine = fingerprints(20000, "race")
    random.Random(seed).shuffle(mine)
    new = []
    start.wait(30)  # all at once: on a loaded machine one could finish before another starts
    for i in range(0, len(mine), 100):
        batch = mine[i : i + 100]
        new += [fp for fp, seen in zip(batch, dupefilter.seen_many(batch), strict=True) if not seen]
    queue.put(new)


def _race_push(url: str, capacity: int, seed: int, queue, start) -> None:
    """As _race, through the scheduler's push script: the new ones are pushed, in the
    same call, onto one shared queue."""
    client = redis.Redis.from_url(url)
    dupefilter = bloom(client, capacity, 0.001)
    requests = FifoQueue(client, DemoSpider(), "demo:requests")
    mine = fingerprints(20000, "race")
    random.Random(seed).shuffle(mine)
    new = []
    start.wait(30)
    for i in range(0, len(mine), 100):
        batch = [Candidate(fp, Entry(fp.encode())) for fp in mine[i : i + 100]]
        while batch:  # a layer that fills answers for the first ones: the rest again
            flags = requests.push_new(batch, dupefilter)
            new += [c.fingerprint for c, is_new in zip(batch, flags, strict=False) if is_new]
            batch = batch[len(flags) :]
    queue.put(new)


def race(server, url: str, capacity: int, path: str) -> list[str]:
    """4 processes check and record the same 20,000 fingerprints, shuffled, at once
    (``path``: seen_many() or the push script); the fingerprints reported new, checked
    never twice and, through the push script, pushed exactly when reported new."""
    context = multiprocessing.get_context("fork")
    queue, start = context.Queue(), context.Barrier(4)
    target = _race if path == "seen_many" else _race_push
    workers = [
        context.Process(target=target, args=(url, capacity, s, queue, start)) for s in range(4)
    ]
    for worker in workers:
        worker.start()
    reported = [queue.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(10)
    new = [fp for report in reported for fp in report]
    assert len(new) == len(set(new))  # never new twice
    if path == "push script":  # pushed exactly when reported new
        assert sorted(server.lrange("demo:requests", 0, -1)) == sorted(fp.encode() for fp in new)
    assert all(report for report in reported)  # they did race
    return new


@pytest.mark.parametrize("path", ["seen_many", "push script"])
@pytest.mark.parametrize("capacity", [10**6, 4000])
def test_racing_processes_see_each_fingerprint_new_once(server, redis_url, capacity, path):
    new = race(server, redis_url, capacity, path)
    if capacity == 10**6:  # far from full: no false positive to expect
        assert sorted(new) == sorted(fingerprints(20000, "race"))
    else:  # grown 3 times while racing (the stale-layer path): only false positives missing
        assert len(new) >= 0.995 * 20000
        assert int(server.hget("demo:dupefilter", "layers")) == 4  # 4000 + 6000 + 9000 + ...


# --- keys, backend, operations -------------------------------------------------------


def test_blocks_are_strings_of_their_full_size(server):
    dupefilter = bloom(server, 10**5, 0.01)
    dupefilter.seen_many(fingerprints(100, "in"))
    layer = dupefilter.layers[0]
    assert layer.blocks == 8  # the count whose blocks fit their allocations best
    blocks = {k.decode() for k in server.keys("demo:dupefilter:bloom:1:0:*")}
    # 100 fingerprints, each in one block of generation 1: every block written
    assert blocks == {f"demo:dupefilter:bloom:1:0:{i}" for i in range(8)}
    for key in blocks:
        assert server.type(key) == b"string"
        assert server.strlen(key) == layer.block_bits // 8
        # no allocation rounding: a 64 KiB string would take 80 KiB
        assert server.memory_usage(key, samples=0) <= layer.block_bits // 8 + 100


def test_the_layout_is_stored_and_other_settings_are_refused(server):
    bloom(server, 10**4, 0.01).open()
    meta = server.hgetall("demo:dupefilter")  # the filter's key is its meta hash
    assert meta[b"capacity"] == b"10000" and meta[b"layers"] == b"1"
    assert meta[b"layer:0"] == BloomLayout(10**4, 0.01).layer(0).describe().encode()
    with pytest.raises(ConfigurationError, match="BLOOMFILTER_CAPACITY"):
        bloom(server, 2 * 10**4, 0.01).open()


@pytest.mark.parametrize(
    "version, hash_name",
    [("1", "blake2b-192-edh"), ("2", "blake2b-192-edh")],  # 1: growing by 2; 2: worker's bits
)
def test_a_filter_of_an_old_format_is_refused(server, version, hash_name):
    bloom(server, 10**4, 0.01).open()
    server.hset("demo:dupefilter", mapping={"version": version, "hash": hash_name})
    with pytest.raises(
        ConfigurationError, match=rf"format version = '{version}'.*scrapy-redis version.*clear"
    ):
        bloom(server, 10**4, 0.01).open()


def test_auto_uses_lua_on_a_server_without_redisbloom(server):
    assert server_has_redisbloom(server) is False  # Debian's redis-server 7.0
    dupefilter = bloom(server, 1000, 0.01)
    dupefilter.open()
    assert dupefilter.backend == "lua"


def test_forcing_redisbloom_without_it_fails_at_open_naming_the_setting(redis_url, server):
    crawler = get_crawler(DemoSpider, bloom_settings(redis_url, BLOOMFILTER_BACKEND="redisbloom"))
    dupefilter = BloomDupeFilter.from_crawler(crawler)
    with pytest.raises(ConfigurationError, match="BLOOMFILTER_BACKEND"):
        dupefilter.open()
    assert server.keys("*") == []


def test_an_unknown_backend_is_refused(redis_url):
    crawler = get_crawler(DemoSpider, bloom_settings(redis_url, BLOOMFILTER_BACKEND="bitmap"))
    with pytest.raises(ConfigurationError, match="BLOOMFILTER_BACKEND"):
        BloomDupeFilter.from_crawler(crawler)


def test_standalone_use_under_scrapys_scheduler(redis_url, server):
    settings = bloom_settings(redis_url, BLOOMFILTER_CAPACITY=5000, BLOOMFILTER_ERROR_RATE=0.01)
    crawler = get_crawler(DemoSpider, settings)
    dupefilter = BloomDupeFilter.from_crawler(crawler)
    dupefilter.open()
    assert crawler.stats.get_value("dupefilter/capacity") == 5000
    assert dupefilter.request_seen(Request("https://example.com/")) is False
    assert dupefilter.request_seen(Request("https://example.com/")) is True
    assert dupefilter.request_seen(Request("https://example.com/?")) is True  # canonical URL
    assert dupefilter.count() == 1
    dupefilter.close("finished")
    assert server.keys("*") == []  # the one-time filter and its write record are deleted


def test_under_the_redis_scheduler_on_the_shared_key(redis_url, server, schedulers):
    scheduler = schedulers(
        {**bloom_settings(redis_url), "SCHEDULER": "scrapy_redis.scheduler.Scheduler"}
    )
    assert isinstance(scheduler.df, BloomDupeFilter) and scheduler.df.key == "demo:dupefilter"
    assert scheduler.enqueue_request(Request("http://example.com/a")) is True
    assert scheduler.enqueue_request(Request("http://example.com/a")) is True  # buffered
    assert scheduler.enqueue_request(Request("http://example.com/b")) is True
    urls = {scheduler.next_request().url for _ in range(2)}
    assert urls == {"http://example.com/a", "http://example.com/b"}
    assert scheduler.next_request() is None
    assert scheduler.stats.get_value("dupefilter/filtered") == 1
    assert server.hget("demo:dupefilter", "count") == b"2"
    assert scheduler.stats.get_value("dupefilter/capacity") == 10**6


@pytest.mark.parametrize("queue", ["FifoQueue", "PriorityQueue"])
def test_the_schedulers_push_script_checks_and_records_the_bits(
    redis_url, server, schedulers, queue
):
    from helpers import Calls

    settings = {
        **bloom_settings(redis_url, BLOOMFILTER_CAPACITY=10**5),
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue}",
    }
    scheduler = schedulers(settings)
    scheduler.df.open()  # the filter's first use: its layout is read (or made)
    calls = Calls(server, "evalsha", "bitfield")
    urls = [f"http://example.com/{n}" for n in range(90)]
    for url in [*urls, *urls[:9]]:
        scheduler.enqueue_request(Request(url))
    scheduler.enqueue_request(Request(urls[0], dont_filter=True))
    assert scheduler.send_enqueued()
    made = calls()
    assert made["evalsha"] == 1  # one script call: 90 new, 9 duplicates, 1 unfiltered
    assert made["bitfield"] >= 1  # in that call
    assert scheduler.df.count() == 90 and scheduler.stats.get_value("dupefilter/filtered") == 9
    popped = sorted(r.url for r in iter(scheduler.next_request, None))
    assert popped == sorted([*urls, urls[0]])


@pytest.mark.parametrize("queue", ["FifoQueue", "PriorityQueue"])
def test_a_layer_filling_mid_batch_sends_the_rest_to_the_next(
    redis_url, server, schedulers, queue, caplog
):
    settings = {
        **bloom_settings(redis_url, BLOOMFILTER_CAPACITY=50, BLOOMFILTER_ERROR_RATE=0.001),
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "SCHEDULER_QUEUE_CLASS": f"scrapy_redis.queue.{queue}",
        "SCHEDULER_ENQUEUE_BATCH_SIZE": 1000,
    }
    scheduler = schedulers(settings)
    urls = [f"http://example.com/{n}" for n in range(400)]
    unfiltered = [f"http://example.com/again/{n}" for n in range(0, 400, 25)]
    with caplog.at_level(logging.WARNING):
        for n, url in enumerate(urls):
            scheduler.enqueue_request(Request(url))
            if n % 25 == 0:  # dont_filter requests mixed in: never checked, always pushed
                scheduler.enqueue_request(Request(unfiltered[n // 25], dont_filter=True))
        assert scheduler.send_enqueued()
    layers = int(server.hget("demo:dupefilter", "layers"))
    assert layers >= 3  # grown while the batch was sent, in several calls
    assert len(scheduler.df.layers) == layers  # the filter knows, and said so
    assert "past its capacity" in caplog.text
    assert scheduler.stats.get_value("dupefilter/layers") == layers
    count = int(server.hget("demo:dupefilter", "count"))
    popped = [r.url for r in iter(scheduler.next_request, None)]
    assert sorted(set(popped) & set(unfiltered)) == sorted(unfiltered)
    popped = [url for url in popped if url not in unfiltered]
    assert len(popped) == len(set(popped)) == count  # each pushed once, when counted new
    assert count >= 398  # at 0.1 %, a false positive or two at most
    for url in urls:  # every one is now seen, in whichever layer it went to
        scheduler.enqueue_request(Request(url))
    assert scheduler.send_enqueued()
    assert scheduler.next_request() is None


def test_a_layer_filled_exactly_is_reported(redis_url, server, schedulers, caplog):
    """One request per call: the call that fills a layer answers in full; the next finds
    the layers changed, and the filter says the filter grew."""
    settings = {
        **bloom_settings(redis_url, BLOOMFILTER_CAPACITY=5, BLOOMFILTER_ERROR_RATE=0.01),
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "SCHEDULER_ENQUEUE_DELAY": 0,
    }
    scheduler = schedulers(settings)
    with caplog.at_level(logging.WARNING):
        for n in range(30):
            scheduler.enqueue_request(Request(f"http://example.com/{n}"))
    layers = int(server.hget("demo:dupefilter", "layers"))
    assert layers >= 3
    assert caplog.text.count("past its capacity") == layers - 1
    assert scheduler.stats.get_value("dupefilter/layers") == layers
    assert scheduler.stats.get_value("dupefilter/capacity") == scheduler.df.capacity()


def test_a_second_worker_opens_on_the_filters_hash(redis_url, server, schedulers):
    settings = {**bloom_settings(redis_url), "SCHEDULER": "scrapy_redis.scheduler.Scheduler"}
    first = schedulers({**settings, "SCHEDULER_PERSIST": True})
    assert first.enqueue_request(Request("http://example.com/a")) and first.send_enqueued()
    assert server.type("demo:dupefilter") == b"hash"
    second = schedulers(settings)  # its key check expects the filter's hash, not a set
    assert second.enqueue_request(Request("http://example.com/a")) and second.send_enqueued()
    assert second.stats.get_value("dupefilter/filtered") == 1


def test_a_set_in_the_filters_key_is_refused_at_open(redis_url, server, schedulers):
    server.sadd("demo:dupefilter", "0" * 40)  # the original's fingerprints, not migrated
    settings = {**bloom_settings(redis_url), "SCHEDULER": "scrapy_redis.scheduler.Scheduler"}
    with pytest.raises(WrongKeyTypeError, match="SCHEDULER_DUPEFILTER_KEY"):
        schedulers(settings)


def test_a_worker_whose_layers_are_stale_sends_again(redis_url, server):
    first = bloom(server, 100, 0.01)
    second = bloom(server, 100, 0.01)
    first.open(), second.open()
    requests = FifoQueue(server, DemoSpider(), "demo:requests")
    first.seen_many(fingerprints(150, "grow"))  # the first worker grows the filter
    assert len(first.layers) == 2 and len(second.layers) == 1
    batch = [Candidate(fp, Entry(fp.encode())) for fp in fingerprints(30, "late")]
    assert requests.push_new(batch, second) == [True] * 30  # stale: read again, sent again
    assert len(second.layers) == 2
    assert requests.push_new(batch, second) == [False] * 30
    assert server.llen("demo:requests") == 30


def test_the_filter_goes_with_the_crawls_shared_keys(redis_url, server, schedulers):
    settings = {**bloom_settings(redis_url), "SCHEDULER": "scrapy_redis.scheduler.Scheduler"}
    settings["SCHEDULER_ENQUEUE_DELAY"] = 0
    scheduler = schedulers(settings)
    assert scheduler.enqueue_request(Request("http://example.com/a")) is True
    # SCHEDULER_PERSIST is False: the last worker deletes the shared keys, then clears
    # the filter (its blocks and their list too).
    scheduler.close("finished")
    assert server.keys("demo:dupefilter*") == []
    scheduler = schedulers(settings)
    assert scheduler.enqueue_request(Request("http://example.com/a")) is True  # a new crawl
    assert server.exists("demo:dupefilter")


def test_a_key_of_another_type_is_refused(server):
    server.sadd("demo:dupefilter", "0" * 40)  # RFPDupeFilter's fingerprints
    with pytest.raises(WrongKeyTypeError, match="SCHEDULER_DUPEFILTER_KEY"):
        bloom(server, 1000, 0.01).open()
    assert server.type("demo:dupefilter") == b"set"


def test_it_has_no_set_members_to_give(server):
    with pytest.raises(TypeError, match="seen_bits"):
        bloom(server, 100, 0.01).seen_members(fingerprints(1, "x"))


def test_forget_is_refused_pointing_to_the_exact_filter(server):
    with pytest.raises(BloomForgetError, match="LeanDupeFilter"):
        bloom(server, 1000, 0.01).forget(Request("https://example.com/"))


def test_clear_deletes_every_layer(server):
    dupefilter = bloom(server, 1000, 0.01)
    inserted = fingerprints(2000, "in")
    dupefilter.seen_many(inserted)
    assert len(dupefilter.layers) == 2
    dupefilter.clear()
    assert server.keys("demo:dupefilter*") == []
    assert not any(dupefilter.seen_many(inserted[:100]))
    assert dupefilter.count() == 100


def test_clear_deletes_a_filter_made_with_other_settings(server):
    bloom(server, 10**6, 0.01).seen_many(fingerprints(2000, "in"))
    assert len(server.keys("demo:dupefilter:bloom:1:0:*")) > 1
    bloom(server, 1000, 0.01).clear()  # one block per layer in its own layout
    assert server.keys("demo:dupefilter*") == []


# --- writes sent again -----------------------------------------------------------------


@pytest.fixture
def proxy(redis_server):
    proxy = LossyProxy(redis_server.port)
    yield proxy
    proxy.close()


def lose_a_reply(proxy, how: str) -> None:
    """A one-time filter through ``proxy``: the reply to a batch is lost (redis-py sends the
    batch again), and the batch is answered as the first time."""
    settings = {"REDIS_URL": proxy.url, "REDIS_PARAMS": {"socket_timeout": 0.5}}
    dupefilter = BloomDupeFilter.from_crawler(get_crawler(DemoSpider, settings))
    batch = fingerprints(50, "in")
    assert dupefilter.seen_many(batch[:1]) == [False]  # opens the filter, loads the script
    proxy.lose_next_reply(how)
    assert dupefilter.seen_many(batch) == [True] + [False] * 49  # redis-py sent it twice
    assert proxy.lost
    assert all(dupefilter.seen_many(batch))
    dupefilter.close("finished")


@pytest.mark.parametrize("how", ["drop", "stall"])
def test_a_batch_whose_reply_is_lost_is_answered_as_first(proxy, server, how):
    lose_a_reply(proxy, how)
    assert server.keys("*") == []  # its one-time filter, its blocks, its write record


def test_a_request_sent_again_after_an_outage_is_not_taken_for_a_duplicate(proxy, server):
    settings = {"REDIS_URL": proxy.url, "REDIS_PARAMS": {"socket_timeout": 0.5}}
    dupefilter = BloomDupeFilter.from_crawler(get_crawler(DemoSpider, settings))
    assert dupefilter.request_seen(Request("https://example.com/")) is False  # loads scripts
    proxy.lose_next_reply(times=2)  # the retry's too: the call fails (an outage)
    with pytest.raises((redis.ConnectionError, redis.TimeoutError)):
        dupefilter.request_seen(Request("https://example.com/a"))
    # Sent again when Redis answers (as the scheduler does): the first copy was applied.
    assert dupefilter.request_seen(Request("https://example.com/a")) is False
    assert dupefilter.request_seen(Request("https://example.com/a")) is True
    dupefilter.close("finished")


# --- a real crawl ----------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_two_workers_crawl_every_page_once_through_a_growing_filter(redis_url, server, tmp_path):
    """Two ``scrapy crawl`` processes share a Bloom filter that grows twice during the crawl
    (capacity 300 for ~1,400 URLs; an error rate of 1e-6: a false positive in about one
    of 300 such crawls, measured). A page never fetched must be a false positive of the
    filter (it holds its fingerprint; the workers popped every request they pushed), or
    reachable only through one: they are counted, not hoped away."""
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
        server.lpush("myspider:start_urls", json.dumps({"url": site.url}))
        settings = {
            "MAX_IDLE_TIME_BEFORE_CLOSE": IDLE,
            "SCHEDULER_PERSIST": True,
            "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.BloomDupeFilter",
            "BLOOMFILTER_CAPACITY": 300,
            "BLOOMFILTER_ERROR_RATE": 1e-6,
        }
        workers = crawl("myspider_redis", redis_url, tmp_path, settings=settings, arguments=DOMAIN)
        hits = site.snapshot()
    meta = server.hgetall("myspider_redis:dupefilter")
    shared = bloom(server, 300, 1e-6, key="myspider_redis:dupefilter")
    base = site.url.rstrip("/")
    false_positives = {  # (seen_many() records what it does not hold: read meta before)
        path
        for path in set(expected_hits(PAGES)) - set(hits)
        if shared.seen_many([request_fingerprint(Request(base + path))])[0]
    }
    assert len(false_positives) <= 3, false_positives
    expected = reachable_hits(PAGES, false_positives)
    assert_hits(hits, expected)
    pushed = sum(worker.stats.get("scheduler/enqueued/redis", 0) for worker in workers)
    assert pushed == sum(worker.stats.get("scheduler/dequeued/redis", 0) for worker in workers)
    assert meta[b"layers"] == b"3"  # 300 + 450 + 675
    assert int(meta[b"count"]) == len(expected) - 1  # all but the start URL
    assert any("past its capacity" in worker.log for worker in workers)
    filtered = sum(worker.stats.get("dupefilter/filtered", 0) for worker in workers)
    assert filtered > PAGES  # the site links each page ~10 times
