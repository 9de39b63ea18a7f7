"""The parts a Redis spider is built from, on their own (see test_spiders.py for the whole)."""

from __future__ import annotations

import dataclasses
import logging

import pytest
from scrapy import Request
from scrapy.settings import Settings
from twisted.internet import task

from scrapy_redis.start.filter import FilteredStartRequests
from scrapy_redis.start.idle import IdleTimer
from scrapy_redis.start.polling import Poller
from scrapy_redis.start.reader import StartMessageReader
from scrapy_redis.start.settings import StartSettings, read_start_settings
from scrapy_redis.store.outage import OutageGuard


class Arguments:
    name = "s"
    redis_key = None
    redis_batch_size = None
    redis_encoding = None
    redis_key_check_interval = None
    max_idle_time = None


def test_settings_are_read_once_into_a_frozen_value():
    config = read_start_settings(
        Arguments(), Settings({"CONCURRENT_REQUESTS": 5, "REDIS_START_URLS_AS_ZSET": True})
    )
    assert config == StartSettings(
        keys=("s:start_urls",),
        batch_size=5,
        encoding="utf-8",
        key_check_interval=0,
        max_idle_time=0,
        mode="zset",
        dont_filter=True,
        poll_interval=1.0,
        worker_timeout=30,
        max_deliveries=3,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.batch_size = 1  # type: ignore[misc]


def test_spider_attributes_win_over_settings():
    arguments = Arguments()
    arguments.redis_key = ["a:%(name)s", "b"]
    arguments.redis_batch_size = "2"
    arguments.max_idle_time = "1.5"
    settings = Settings({"REDIS_START_URLS_BATCH_SIZE": 9, "MAX_IDLE_TIME_BEFORE_CLOSE": 7})
    config = read_start_settings(arguments, settings)
    assert (config.keys, config.batch_size, config.max_idle_time) == (("a:s", "b"), 2, 1.5)


def test_a_negative_key_check_interval_is_refused():
    with pytest.raises(ValueError, match="redis_key_check_interval cannot be negative"):
        read_start_settings(Arguments(), Settings({"REDIS_KEY_CHECK_INTERVAL": -1}))


def test_the_idle_timer_counts_from_the_first_idle_event():
    now = [100.0]
    timer = IdleTimer(clock=lambda: now[0])
    assert not timer.running
    assert not timer.expired(10)  # the period begins
    assert timer.running and timer.since == 100
    now[0] = 109.9
    assert not timer.expired(10)
    now[0] = 110
    assert timer.expired(10)
    assert not timer.expired(0)  # 0: never
    timer.busy()
    assert not timer.running and not timer.expired(10)  # a new period
    assert timer.expired(-1)  # negative: at the first idle event


def test_the_poller_runs_its_loops_on_its_clock_until_stopped():
    clock, calls = task.Clock(), []
    poller = Poller(clock)
    poller.every(1, lambda: calls.append("a"))
    poller.every(2.5, lambda: calls.append("b"))
    assert calls == [] and poller.running  # not at once
    clock.advance(1)
    clock.advance(1)
    clock.advance(1)
    assert calls == ["a", "a", "b", "a"]
    poller.stop()
    assert not poller.running and clock.getDelayedCalls() == []
    clock.advance(10)
    assert calls == ["a", "a", "b", "a"]


def test_filtered_start_requests_are_counted_and_reported_once(caplog):
    counted = []
    filtered = FilteredStartRequests(lambda key, n: counted.append((key, n)))
    watched, kept, other = (
        Request("https://a"),
        Request("https://b", dont_filter=True),
        Request("https://c"),
    )
    filtered.watch([watched, kept])
    for request in (watched, kept, other, watched):
        filtered.dropped(request)
    assert counted == [("redis/start_requests/filtered", 1)]
    with caplog.at_level(logging.INFO, logger="scrapy_redis"):
        filtered.report()
        filtered.report()
    assert caplog.text.count("Start requests filtered as duplicates") == 1


def reader(server, timeout=30.0, guard=None):
    config = read_start_settings(Arguments(), Settings({"SCHEDULER_WORKER_TIMEOUT": timeout}))
    counted: list[tuple[str, int]] = []
    guard = guard or OutageGuard(60)
    return StartMessageReader.build(
        server, config, guard, lambda k, n: counted.append((k, n)), None
    )


def test_the_reader_leases_what_it_pops_until_acknowledged(server):
    server.rpush("s:start_urls", "https://a", "https://b")
    part = reader(server)
    assert part.pop(5) == ("s:start_urls", [b"https://a", b"https://b"])
    assert len(part.unacked) == 2 and server.hlen("s:start_urls:leases") == 2
    part.ack()
    assert part.unacked == [] and server.hlen("s:start_urls:leases") == 0


def test_the_heartbeat_renews_the_leases_it_holds(server):
    server.rpush("s:start_urls", "https://a")
    part = reader(server, timeout=3)
    assert part.heartbeat_interval == 1
    part.pop(1)
    [(lease, deadline)] = server.zrange("s:start_urls:lease_deadlines", 0, -1, withscores=True)
    server.zadd("s:start_urls:lease_deadlines", {lease: deadline - 2000})
    clock = task.Clock()
    Poller(clock).every(part.heartbeat_interval, part.beat)
    clock.advance(1)
    assert server.zscore("s:start_urls:lease_deadlines", lease) >= deadline


def test_the_heartbeat_waits_while_the_guard_backs_off(server):
    now = [0.0]
    guard = OutageGuard(60, clock=lambda: now[0])
    guard.failed(ConnectionError("down"))  # retry in 0.5 s
    server.rpush("s:start_urls", "https://a")
    part = reader(server, timeout=3, guard=guard)
    part.pop(1)
    [lease] = server.zrange("s:start_urls:lease_deadlines", 0, -1)
    server.zadd("s:start_urls:lease_deadlines", {lease: 1})
    part.beat()
    assert server.zscore("s:start_urls:lease_deadlines", lease) == 1  # not tried
    now[0] = 1
    part.beat()
    assert server.zscore("s:start_urls:lease_deadlines", lease) > 1


def test_giving_back_puts_the_messages_back_at_the_head(server):
    server.rpush("s:start_urls", "https://a", "https://b", "https://c")
    part = reader(server)
    part.pop(2)
    part.give_back()
    assert server.lrange("s:start_urls", 0, -1) == [b"https://a", b"https://b", b"https://c"]
    assert server.hlen("s:start_urls:leases") == 0
