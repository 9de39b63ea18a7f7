"""The push script records fingerprints where the filter says: one set, or many buckets.

A filter that buckets fingerprints into small sets with integer members (the layout of
a lean exact filter) goes through the same one-call-per-batch path as the original's
one set of hex fingerprints.
"""

from __future__ import annotations

import hashlib

import pytest
from scrapy import Request

from helpers import Calls, make_spider
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.queue import Base, Candidate, Entry, FifoQueue, PriorityQueue
from scrapy_redis.queues.seen_sets import SeenMembers, SetFilter, single_set


class BucketFilter(RFPDupeFilter):
    """16 buckets chosen by the first hex digit; the next 7 as an integer member."""

    def seen_members(self, fingerprints):
        keys = [f"{self.key}:b:{digit:x}" for digit in range(16)]
        return SeenMembers(self.key, keys, [(int(f[0], 16), int(f[1:8], 16)) for f in fingerprints])


def bucketed(server):
    return sorted(
        (key.decode(), sorted(int(m) for m in server.smembers(key)))
        for key in server.scan_iter("demo:dupefilter:b:*")
    )


def test_our_filter_records_in_its_one_set():
    df = RFPDupeFilter(None, "seen")
    assert isinstance(df, SetFilter)
    assert df.seen_members(["aa", "bb"]) == single_set("seen", ["aa", "bb"])
    assert single_set("seen", ["aa"]) == SeenMembers("seen", ["seen"], [(0, "aa")])


@pytest.mark.parametrize("queue_cls", [FifoQueue, PriorityQueue])
def test_a_batch_is_checked_and_recorded_in_its_buckets_in_one_call(
    settings_dict, server, schedulers, queue_cls
):
    settings = {
        **settings_dict,
        "DUPEFILTER_CLASS": BucketFilter,
        "SCHEDULER_QUEUE_CLASS": queue_cls,
    }
    scheduler = schedulers(settings)
    calls = Calls(server, "evalsha", "sadd", "smismember")
    urls = [f"http://example.com/{n}" for n in range(60)]
    for url in [*urls, *urls[:10]]:
        scheduler.enqueue_request(Request(url, priority=len(url)))
    scheduler.enqueue_request(Request(urls[0], dont_filter=True))
    assert scheduler.send_enqueued()
    assert calls()["evalsha"] == 1  # 71 requests, one script call
    assert scheduler.stats.get_value("dupefilter/filtered") == 10
    df = scheduler.df
    expected: dict[str, list[int]] = {}
    for url in urls:
        layout = df.seen_members([df.request_fingerprint(Request(url))])
        index, member = layout.members[0]
        expected.setdefault(layout.keys[index], []).append(member)
    assert bucketed(server) == sorted((k, sorted(v)) for k, v in expected.items())
    assert not server.exists("demo:dupefilter")  # nothing in the one-set layout
    for key, _ in bucketed(server):
        assert server.object("encoding", key) in (b"intset", "intset")
    popped = sorted(r.url for r in iter(scheduler.next_request, None))
    assert popped == sorted([*urls, urls[0]])


def test_a_batch_naming_thousands_of_sets(server):
    """More sets than Lua's unpack() takes in one go."""

    class ManyBuckets(RFPDupeFilter):
        def seen_members(self, fingerprints):
            keys = [f"many:{f[:4]}" for f in fingerprints]
            return SeenMembers(self.key, keys, [(i, 1) for i in range(len(fingerprints))])

    queue = FifoQueue(server, make_spider(), "q")
    fingerprints = [f"{n:04x}" + "0" * 36 for n in range(9000)]
    candidates = [Candidate(f, None) for f in fingerprints]
    df = ManyBuckets(server, "many")
    assert queue.push_new(candidates, df) == [True] * 9000
    assert queue.push_new(candidates[:3], df) == [False] * 3
    assert server.scard("many:0001") == 1


def test_without_one_script_the_buckets_still_hold(settings_dict, server, schedulers, monkeypatch):
    # A Redis Cluster whose buckets and queue keys hash to different slots.
    monkeypatch.setattr(Base, "scripts_may_use", lambda self, *keys: False)
    scheduler = schedulers({**settings_dict, "DUPEFILTER_CLASS": BucketFilter})
    for url in ["http://example.com/a", "http://example.com/b", "http://example.com/a"]:
        scheduler.enqueue_request(Request(url))
    scheduler.enqueue_request(Request("http://example.com/a", dont_filter=True))
    assert scheduler.send_enqueued()
    assert sorted(r.url for r in iter(scheduler.next_request, None)) == [
        "http://example.com/a",
        "http://example.com/a",
        "http://example.com/b",
    ]
    assert sum(len(members) for _, members in bucketed(server)) == 2


class FailingOncePush(FifoQueue):
    """A queue whose first push fails, as in an outage, after the check was recorded."""

    failures = 1

    def push_entries(self, entries):
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the push is lost")
        super().push_entries(entries)


def _bloom(server):
    from scrapy_redis.dupefilter import BloomDupeFilter
    from scrapy_redis.dupefilters.bloom_layout import BloomLayout

    return BloomDupeFilter(server, "demo:dupefilter", layout=BloomLayout(1000, 0.001))


@pytest.mark.parametrize("filter_kind", ["one set", "buckets", "bloom"])
def test_without_one_script_a_write_sent_again_pushes_what_it_found_new(
    server, monkeypatch, filter_kind
):
    """A Redis Cluster whose keys are in several slots: the check is one call, the push
    another. When the push fails, the same write sent again pushes the requests the
    check found new (a check made again would find them all seen)."""
    monkeypatch.setattr(Base, "scripts_may_use", lambda self, *keys: False)
    seen = {
        "one set": lambda: "demo:dupefilter",
        "buckets": lambda: BucketFilter(server, "demo:dupefilter"),
        "bloom": lambda: _bloom(server),
    }[filter_kind]()
    queue = FailingOncePush(server, make_spider(), "demo:requests")
    # distinct first digits (the buckets); after them, SHA1-like digits (the Bloom filter
    # takes 40 hex digits as a hash: zeros would give every one the same bits)
    fingerprints = [f"{n:02x}" + hashlib.sha1(b"%d" % n).hexdigest()[2:] for n in range(10)]
    candidates = [Candidate(f, Entry(f.encode())) for f in fingerprints]
    with pytest.raises(ConnectionError):
        queue.push_new(candidates, seen, write=7)
    assert queue.push_new(candidates, seen, write=7) == [True] * 10  # the same write again
    assert server.llen("demo:requests") == 10
    assert queue.push_new(candidates, seen, write=8) == [False] * 10  # a new write: seen


def test_a_bucket_of_another_type_fails_the_batch_without_recording_any(server):
    """Buckets asked about one member are SADDed while the batch is checked; one that
    fails makes the call undo the others, so sending the batch again finds them new."""
    queue = FifoQueue(server, make_spider(), "demo:requests")
    df = BucketFilter(server, "demo:dupefilter")
    fingerprints = [f"{digit:x}" + "1" * 39 for digit in range(16)]  # a bucket each
    candidates = [Candidate(f, Entry(f.encode())) for f in fingerprints]
    bad = "demo:dupefilter:b:7"
    server.set(bad, "not a set")
    with pytest.raises(Exception, match="WRONGTYPE"):
        queue.push_new(candidates, df)
    server.delete(bad)
    assert bucketed(server) == [] and server.llen("demo:requests") == 0
    assert queue.push_new(candidates, df) == [True] * 16
