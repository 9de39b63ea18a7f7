"""Switching DUPEFILTER_CLASS on a kept crawl: the original's set copied into the new filter."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from scrapy import Request

from scrapy_redis.dupefilter import request_fingerprint
from scrapy_redis.migrate_dupefilter import main, migrate
from test_e2e import EXAMPLE
from test_seen_sets import BucketFilter, bucketed

URLS = [f"http://example.com/{n}" for n in range(2500)]


def old_set(server) -> None:
    """The original's layout: one set of hex fingerprints, as a crawl left it."""
    server.sadd("demo:dupefilter", *(request_fingerprint(Request(url)) for url in URLS))


def test_the_old_set_is_copied_into_the_buckets(server):
    old_set(server)
    seen = []
    copied = migrate(
        server, "demo:dupefilter", BucketFilter(server, "demo:dupefilter"), 500, seen.append
    )
    assert copied == len(URLS) and seen[-1] == len(URLS) and len(seen) >= 2
    assert sum(len(members) for _, members in bucketed(server)) == len(URLS)
    again = migrate(server, "demo:dupefilter", BucketFilter(server, "demo:dupefilter"))
    assert again == len(URLS)  # copied again: nothing added twice
    assert sum(len(members) for _, members in bucketed(server)) == len(URLS)


def test_a_resumed_crawl_finds_the_old_fingerprints(settings_dict, server, schedulers):
    old_set(server)
    settings = {**settings_dict, "DUPEFILTER_CLASS": BucketFilter, "SCHEDULER_PERSIST": True}
    migrate(server, "demo:dupefilter", BucketFilter(server, "demo:dupefilter"))
    server.unlink("demo:dupefilter")
    scheduler = schedulers(settings)
    for url in [*URLS[:50], "http://example.com/new"]:
        scheduler.enqueue_request(Request(url))
    assert scheduler.send_enqueued()
    assert [r.url for r in iter(scheduler.next_request, None)] == ["http://example.com/new"]
    assert scheduler.stats.get_value("dupefilter/filtered") == 50


def test_the_command_copies_and_deletes_the_source(redis_url, server, capsys):
    old_set(server)
    filter_path = f"{BucketFilter.__module__}.BucketFilter"
    args = ["demo", "-s", f"REDIS_URL={redis_url}", "-s", f"DUPEFILTER_CLASS={filter_path}"]
    assert main([*args, "--delete-source"]) == 0
    assert f"Copied {len(URLS)} fingerprints from demo:dupefilter" in capsys.readouterr().out
    assert not server.exists("demo:dupefilter")
    assert sum(len(members) for _, members in bucketed(server)) == len(URLS)


def test_the_command_keeps_a_source_the_new_filter_uses(redis_url, server):
    old_set(server)
    args = ["demo", "-s", f"REDIS_URL={redis_url}", "--delete-source"]
    with pytest.raises(SystemExit, match="Not deleting demo:dupefilter"):
        main(args)  # the project's filter is still RFPDupeFilter: same set
    assert server.scard("demo:dupefilter") == len(URLS)


def test_a_key_of_another_type_is_refused(server):
    server.lpush("demo:dupefilter", "x")
    with pytest.raises(ValueError, match="holds a list"):
        migrate(server, "demo:dupefilter", BucketFilter(server, "demo:dupefilter"))


def test_the_old_set_is_copied_into_the_lean_filter(server):
    from scrapy_redis.dupefilter import LeanDupeFilter

    old_set(server)
    lean = LeanDupeFilter(server, "demo:dupefilter", capacity=10_000)
    assert migrate(server, "demo:dupefilter", lean) == len(URLS)
    assert server.scard("demo:dupefilter") == len(URLS)  # read where it is: not in the way
    assert not server.exists("demo:dupefilter:old")
    assert lean.count() == len(URLS)  # its own count kept
    assert lean.request_seen(Request(URLS[7])) is True
    assert lean.request_seen(Request("http://example.com/new")) is False


def test_the_old_set_is_copied_into_a_bloom_filter_on_the_same_key(server):
    from scrapy_redis.dupefilter import BloomDupeFilter
    from scrapy_redis.dupefilters.bloom_layout import BloomLayout

    old_set(server)
    bloom = BloomDupeFilter(server, "demo:dupefilter", layout=BloomLayout(10_000, 0.001))
    assert migrate(server, "demo:dupefilter", bloom) == len(URLS)
    assert server.type("demo:dupefilter") == b"hash"  # the Bloom filter's layout
    assert server.scard("demo:dupefilter:old") == len(URLS)  # the set, moved aside
    assert bloom.count() == len(URLS)
    assert bloom.request_seen(Request(URLS[7])) is True
    assert bloom.request_seen(Request("http://example.com/new")) is False
    assert migrate(server, "demo:dupefilter", bloom) == len(URLS)  # again: read from :old
    assert bloom.count() == len(URLS) + 1


def test_the_command_moves_the_set_out_of_the_bloom_filters_way(redis_url, server, capsys):
    old_set(server)
    args = ["demo", "-s", f"REDIS_URL={redis_url}", "--delete-source"]
    args += ["-s", "DUPEFILTER_CLASS=scrapy_redis.dupefilter.BloomDupeFilter"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"Copied {len(URLS)} fingerprints from demo:dupefilter:old" in out
    assert "Deleted demo:dupefilter:old." in out
    assert not server.exists("demo:dupefilter:old")
    assert int(server.hget("demo:dupefilter", "count")) == len(URLS)


def run_in_project(redis_url: str, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGS`` as a user runs it: from example-project's directory, in a
    process of its own (no reactor installed, unlike this test session)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=EXAMPLE,
        env={**os.environ, "REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_command_runs_from_a_project_directory(redis_url, server):
    server.sadd("myspider:dupefilter", *(request_fingerprint(Request(url)) for url in URLS))
    lean = "scrapy_redis.dupefilter.LeanDupeFilter"
    result = run_in_project(
        redis_url, "scrapy_redis.migrate_dupefilter", "myspider", "-s", f"DUPEFILTER_CLASS={lean}"
    )
    assert result.returncode == 0, result.stderr
    assert f"Copied {len(URLS)} fingerprints from myspider:dupefilter into LeanDupeFilter" in (
        result.stdout
    )
    assert "Traceback" not in result.stderr


def test_move_crawl_runs_from_a_project_directory_on_an_empty_crawl(redis_url, server):
    """A smoke test (its behaviour is tested in test_move_crawl.py): it runs as a user runs
    it, from a project directory without a reactor, and exits 0 on an empty crawl."""
    target = redis_url.rsplit("/", 1)[0] + "/1"
    result = run_in_project(
        redis_url, "scrapy_redis.move_crawl", "myspider", "--from", redis_url, "--to", target
    )
    assert result.returncode == 0, result.stderr
    assert "Moved 0 requests" in result.stdout
