"""The lean filter's fingerprints that expire (issue 27.1): a batch asks each bucket once,
the one request of its bucket is recorded at once, and the filter's own buckets (kept
forever) are asked only when they may hold something, including in data an older version
wrote."""

from __future__ import annotations

import math
import random
import re
import time
from collections import Counter

import pytest
import redis
from scrapy import Request

from helpers import record_dropped
from scrapy_redis.core.lifetime import META_KEY, Expiry
from scrapy_redis.dupefilter import LeanDupeFilter
from scrapy_redis.dupefilters.lean_expiry import (
    BATCH_ROOM,
    GENERATIONS,
    part_fill,
    steady_fill,
)

KEY = "demo:dupefilter"
URL = "http://example.com/a"
HOUR_MS = 3_600_000


def _lean(server, lifetime_ms: int | None = HOUR_MS, capacity: int = 10_000) -> LeanDupeFilter:
    expiry = Expiry(lifetime_ms) if lifetime_ms else None
    return LeanDupeFilter(server, KEY, capacity=capacity, expiry=expiry)


@pytest.mark.parametrize("batch", [1, 7, 400])
def test_batches_answer_as_one_request_at_a_time(server, batch):
    """16 buckets: a batch of 400 asks each bucket about many members at once, a batch of
    1 records its request at once; both answer "new" exactly for the first sighting of
    each URL, duplicates within a batch included."""
    df = _lean(server, capacity=16)
    assert df.layout.buckets == 16
    rnd = random.Random(batch)
    urls = [f"http://example.com/{rnd.randrange(600)}" for _ in range(2000)]
    fingerprints = [df.request_fingerprint(Request(url)) for url in urls]
    new: list[bool] = []
    for start in range(0, len(fingerprints), batch):
        part = fingerprints[start : start + batch]
        new += [not seen for seen in df.seen_expiring(part, [HOUR_MS] * len(part))]
    first = {url: index for index, url in reversed(list(enumerate(urls)))}
    assert new == [first[url] == index for index, url in enumerate(urls)]
    generations = server.keys(f"{KEY}:lean:g*")
    assert generations and all(0 < server.pttl(key) <= HOUR_MS * 1.5 for key in generations)


@pytest.mark.parametrize("batch", [1, 50])
def test_a_fingerprint_kept_forever_is_seen_by_another_worker(server, batch):
    """The other worker opened the filter before: it sent no own buckets, the script
    answers "stale", and it sends them."""
    other = _lean(server, capacity=16)
    assert other.request_seen(Request("http://example.com/b")) is False
    _lean(server, capacity=16).request_seen(Request(URL, meta={META_KEY: None}))
    assert server.hget(f"{KEY}:lean", "forever") == b"1"
    urls = [URL, *(f"http://example.com/{i}" for i in range(batch - 1))]
    fingerprints = [other.request_fingerprint(Request(url)) for url in urls]
    assert other.seen_expiring(fingerprints, [HOUR_MS] * batch)[0] is True


def test_fingerprints_recorded_without_a_lifetime_stay_seen_with_one(server):
    _lean(server, lifetime_ms=None).request_seen(Request(URL))
    df = _lean(server)
    assert df.request_seen(Request(URL)) is True
    assert df.request_seen(Request("http://example.com/b")) is False


def test_the_own_buckets_are_not_asked_while_nothing_is_kept_forever(server):
    """What makes a lookup cheap: nothing was kept forever (no count, no 'forever'), so a
    member put in an own bucket behind the filter's back is not asked about."""
    df = _lean(server)
    assert df.request_seen(Request("http://example.com/b")) is False
    bucket, member = df.layout.locate(df.request_fingerprint(Request(URL)))
    server.sadd(df.layout.bucket_key(df.bucket_base, bucket), member)
    assert df.request_seen(Request(URL)) is False
    assert server.hget(f"{KEY}:lean", "expiry_layout") == b"3"


def test_a_filter_an_older_version_gave_a_lifetime_keeps_what_it_kept_forever(server):
    """Data of the previous layout: a lifetime stored without 'expiry_layout', and a
    fingerprint kept forever in an own bucket that no count says is there."""
    old = _lean(server, lifetime_ms=None)
    old.open()
    bucket, member = old.layout.locate(old.request_fingerprint(Request(URL)))
    server.sadd(old.layout.bucket_key(old.bucket_base, bucket), member)
    server.hset(f"{KEY}:lean", "lifetime_ms", HOUR_MS)
    df = _lean(server)
    assert df.request_seen(Request(URL)) is True
    assert df.request_seen(Request("http://example.com/b")) is False
    assert server.hget(f"{KEY}:lean", "forever") == b"1"


def test_a_push_finds_what_another_worker_kept_forever(settings_dict, server, schedulers):
    settings = {
        **settings_dict,
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.LeanDupeFilter",
        "DUPEFILTER_LIFETIME": 3600,
    }
    scheduler = schedulers(settings)
    scheduler.enqueue_request(Request("http://example.com/b"))
    scheduler.send_enqueued()
    _lean(server).request_seen(Request(URL, meta={META_KEY: None}))
    dropped = record_dropped(scheduler)
    scheduler.enqueue_request(Request(URL))
    scheduler.enqueue_request(Request("http://example.com/c"))
    scheduler.send_enqueued()
    assert [request.url for request in dropped] == [URL] and len(scheduler) == 2


@pytest.mark.parametrize("off_by_spans", [-1, 1])
def test_a_clock_estimate_off_by_a_window_reads_the_clock_again(server, off_by_spans):
    """The script refuses generations that are not the live ones ("stale", nothing
    written): the client reads the server's clock and sends again."""
    df = _lean(server, lifetime_ms=2000)
    assert df.request_seen(Request(URL)) is False
    clock = df._clock
    assert clock is not None
    clock._offset_ms += off_by_spans * df.generations.span_ms
    assert df.request_seen(Request(URL)) is True
    assert df.request_seen(Request("http://example.com/b")) is False
    seconds, micros = server.time()
    assert abs(clock.now_ms() - (seconds * 1000 + micros // 1000)) < 500


@pytest.mark.parametrize("planted", ["every generation", "its own generation"])
def test_a_batch_that_fails_on_a_wrong_type_key_records_nothing(server, planted):
    """Generation keys of another type (planted by hand) for a later bucket of the batch,
    asked (every generation) or only the one its request goes to: the call fails before
    any write, so the first request, in another bucket, is still new."""
    df = _lean(server, capacity=40_000)  # generations of 37 buckets
    assert df.generations.lifetime_ms == HOUR_MS  # stores the lifetime with the filter
    first = df.request_fingerprint(Request(URL))
    bucket = df.layout.locate_parts([first], df.generations.buckets)[0][2]
    later = next(
        fp
        for fp in (df.request_fingerprint(Request(f"{URL}/{i}")) for i in range(100))
        if df.layout.locate_parts([fp], df.generations.buckets)[0][2] != bucket
    )
    keys = df.generation_keys_of(later)  # live - 1 .. live + G + 1, one part each
    assert len(keys) == GENERATIONS + 3
    its_own = GENERATIONS + 1  # live + G
    for key in keys if planted == "every generation" else keys[its_own : its_own + 1]:
        server.set(key, "planted")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        df.seen_expiring([first, later], [HOUR_MS, HOUR_MS])
    assert df.seen_expiring([first], [HOUR_MS]) == [False]


def test_generations_are_sized_for_their_share_of_the_capacity(server):
    """A steady crawl at capacity puts a third of it in each window: a generation's buckets
    are sized for that, fewer than the filter's own, a few hundred each (362 at the
    default limit: their intsets fit 1,536 bytes), any number of them, not a power of
    two. A part holds more (its fullest bucket still within the intset limit): the room
    a steady crawl needs."""
    df = _lean(server, capacity=1_000_000)
    generations = df.generations
    assert df.layout.buckets == 4096 and steady_fill(512) == 362
    assert 8 + 4 * (362 + math.sqrt(362)) <= 1536 < 8 + 4 * (363 + math.sqrt(363))
    assert GENERATIONS == 3
    assert generations.buckets == math.ceil(1_000_000 / 3 / 362) == 921
    fill = part_fill(921, 512)  # less room for the batch that fills a part:
    assert generations.part_capacity == 921 * fill - BATCH_ROOM
    assert 393 < fill < 512 - 4.6 * math.sqrt(fill)
    fields = server.hmget(f"{KEY}:lean", "gen_buckets", "gen_part", "expiry_layout")
    assert fields == [b"921", str(generations.part_capacity).encode(), b"3"]
    rnd = random.Random(3)
    fingerprints = [f"{rnd.getrandbits(160):040x}" for _ in range(20_000)]
    buckets = Counter(gen for _, _, gen in df.layout.locate_parts(fingerprints, 921))
    assert len(buckets) == 921 and max(buckets.values()) < 3 * 20_000 / 921


def test_a_generation_that_receives_more_grows_by_parts(server):
    """A burst of three parts' worth into one generation: each part's buckets stay intsets
    (none past a part's capacity by more than a batch), every fingerprint is found in
    whichever part it went to, by this worker and by one that opened the filter before
    (its view of the parts is stale: the script says so, it reads them again)."""
    df, other = _lean(server, capacity=2000), _lean(server, capacity=2000)
    assert other.request_seen(Request("http://example.com/first")) is False
    generations = df.generations
    assert (generations.buckets, generations.part_capacity) == (2, 465)
    rnd = random.Random(5)
    n = (2 * generations.part_capacity // 100 + 3) * 100  # batches into parts 0, 1 and 2
    fingerprints = [f"{rnd.getrandbits(160):040x}" for _ in range(n)]
    for start in range(0, len(fingerprints), 100):
        batch = fingerprints[start : start + 100]
        assert df.seen_expiring(batch, [HOUR_MS] * 100) == [False] * 100
    keys = server.keys(f"{KEY}:lean:g*")
    parts = Counter(key.split(b":")[-2].split(b".")[1] for key in keys)
    assert parts == {b"0": 2, b"1": 2, b"2": 2}
    assert {server.object("encoding", key) for key in keys} == {b"intset"}
    assert max(server.scard(key) for key in keys) <= 512
    assert other.seen_expiring(fingerprints, [HOUR_MS] * n) == [True] * n
    assert df.request_seen(Request("http://example.com/first")) is True
    assert df.request_seen(Request("http://example.com/new")) is False
    first = df.request_fingerprint(Request("http://example.com/first"))
    parts_and_others = 3 + GENERATIONS + 2  # 3 parts, the others one each
    assert len(df.generation_keys_of(fingerprints[0])) == parts_and_others
    assert df.forget_fingerprint(fingerprints[-1]) and df.forget_fingerprint(first)
    assert other.seen_expiring([fingerprints[-1], first], [HOUR_MS] * 2) == [False, False]


def test_the_counts_of_ended_generations_are_dropped(server):
    """Each generation counts its fingerprints in the meta hash; the first write to a new
    generation drops the fields of those whose window has ended."""
    df = _lean(server, lifetime_ms=400)
    assert df.request_seen(Request(URL)) is False
    first = _generation_fields(server)
    assert len(first) == 1
    deadline = time.monotonic() + 10
    fields = first
    while fields & first and time.monotonic() < deadline:
        df.request_seen(Request(f"{URL}/{time.monotonic()}"))
        fields = _generation_fields(server)
    assert fields and not fields & first and len(fields) <= GENERATIONS + 1


def test_a_filter_of_an_earlier_generation_layout_says_what_it_leaves(server, caplog):
    """Generations written before layout 3 (one part of as many buckets as the filter)
    are not read any more: the log says what that means; the filter goes on in layout 3."""
    _lean(server).request_seen(Request(URL))
    server.hset(f"{KEY}:lean", mapping={"expiry_layout": 2, "gen_buckets": 7})
    df = _lean(server)
    assert df.request_seen(Request("http://example.com/b")) is False
    assert "generations of an earlier layout" in caplog.text
    assert server.hget(f"{KEY}:lean", "expiry_layout") == b"3"
    assert df.generations.buckets == 10 and server.hget(f"{KEY}:lean", "gen_buckets") == b"10"


def _generation_fields(server) -> set[bytes]:
    return {f for f in server.hkeys(f"{KEY}:lean") if re.fullmatch(rb"g[0-9]+", f)}


def test_a_generation_that_counts_nothing_is_not_asked(server, caplog):
    """What makes a fresh generation cheap: a member put behind the filter's back in a
    generation that counts no fingerprint is not asked about; a count that is not one
    (planted) is logged and taken for 0, and the next write replaces it."""
    df = _lean(server, capacity=16)
    generations = df.generations
    fingerprint = df.request_fingerprint(Request(URL))
    _, member, bucket = df.layout.locate_parts([fingerprint], generations.buckets)[0]
    assert df.request_seen(Request("http://example.com/b")) is False  # reads the clock
    live = df._clock.now_ms() // generations.span_ms + 1
    for k in range(live, live + GENERATIONS):  # not the newest: its count is 1 now
        server.sadd(generations.key(df.bucket_base, k, 0, bucket), member)
    assert _generation_fields(server) == {f"g{live + GENERATIONS}".encode()}
    assert df.seen_expiring([fingerprint], [HOUR_MS]) == [False]
    server.hset(f"{KEY}:lean", f"g{live + GENERATIONS}", "planted")
    other = _lean(server, capacity=16)
    assert other.request_seen(Request("http://example.com/c")) is False
    assert "not a count: taken for 0" in caplog.text
    assert server.hget(f"{KEY}:lean", f"g{live + GENERATIONS}") == b"1"
