"""Per-slot queues with fleet-wide limits (scrapy_redis.politeness): the scripts on a real
redis-server, on its own clock (waits are bounded generously and waited for, never slept)."""

from __future__ import annotations

import time

import pytest
from scrapy import Request

from helpers import make_spider
from scrapy_redis.exceptions import ConfigurationError
from scrapy_redis.politeness.limits import SlotLimits
from scrapy_redis.politeness.queue import SlotQueue, member_slot, queued_members
from scrapy_redis.politeness.setup import fleet_queue
from scrapy_redis.queue import PriorityQueue
from scrapy_redis.queues.base import Candidate
from scrapy_redis.queues.leases import LeaseBook
from scrapy_redis.store.keys import slot_queue_keys

KEY = "polite:requests"


def make_queue(server, settings=None, spider_attrs=None) -> SlotQueue:
    spider = make_spider({"DOWNLOAD_DELAY": 0, **(settings or {})})
    for name, value in (spider_attrs or {}).items():
        setattr(spider, name, value)
    return SlotQueue(server, spider, KEY)


def push(queue: SlotQueue, *urls: str, priority: int = 0, **meta) -> None:
    queue.push_entries([queue.encode(Request(u, priority=priority, meta=meta)) for u in urls])


def urls(queue: SlotQueue, entries) -> list[str]:
    return [queue.decode(entry).url for entry in entries]


def take(queue: SlotQueue, book: LeaseBook, count: int = 10):
    ticket = book.ticket()
    entries = queue.pop_entries(count, ticket=ticket)
    return entries, book.taken_batch(ticket, len(entries))


def slot_state(server, slot: str) -> list:
    import msgpack

    raw = server.hget(slot_queue_keys(KEY)[3], slot)
    return msgpack.unpackb(raw, raw=False) if raw else []


def test_one_slot_at_a_time_highest_priority_first_fifo_among_equals(server):
    queue = make_queue(server)
    push(queue, "http://a/1", "http://a/2")
    push(queue, "http://a/3", priority=5)
    push(queue, "http://b/1", "http://b/2", priority=1)
    book = LeaseBook(server, KEY, "w1", 30)
    entries, _ = take(queue, book, 10)
    assert urls(queue, entries) == [
        "http://a/3",
        "http://b/1",
        "http://b/2",
        "http://a/1",
        "http://a/2",
    ]
    assert len(queue) == 0 and queue.is_empty()


def test_a_slot_with_a_delay_starts_one_request_per_delay_fleet_wide(server):
    queue = make_queue(server, {"DOWNLOAD_DELAY": 0.4, "RANDOMIZE_DOWNLOAD_DELAY": False})
    other = make_queue(server, {"DOWNLOAD_DELAY": 0.4, "RANDOMIZE_DOWNLOAD_DELAY": False})
    push(queue, *(f"http://a/{n}" for n in range(3)), "http://b/1")
    first, _ = take(queue, LeaseBook(server, KEY, "w1", 30), 10)
    assert urls(queue, first) == ["http://a/0", "http://b/1"]  # one per slot, now
    started = time.monotonic()
    book = LeaseBook(server, KEY, "w2", 30)  # another worker
    nothing, _ = take(other, book, 10)
    assert nothing == []
    assert 0.3 < other.next_start_in <= 0.4  # a's next start, on the server's clock
    times = []
    while len(times) < 2:
        got, _ = take(other, book, 10)
        if got:
            times.append(time.monotonic() - started)
            assert urls(other, got) == [f"http://a/{len(times)}"]
        assert time.monotonic() - started < 10
    assert times[0] >= 0.39 and times[1] - times[0] >= 0.39


def test_a_waiting_slot_never_holds_up_the_others(server):
    queue = make_queue(
        server, {"DOWNLOAD_SLOTS": {"slow": {"delay": 60, "randomize_delay": False}}}
    )
    push(queue, "http://x/1", "http://x/2", priority=10, download_slot="slow")
    push(queue, *(f"http://fast{n}/" for n in range(5)))
    book = LeaseBook(server, KEY, "w1", 30)
    first, _ = take(queue, book, 1)
    assert urls(queue, first) == ["http://x/1"]
    rest, _ = take(queue, book, 10)
    assert urls(queue, rest) == [f"http://fast{n}/" for n in range(5)]
    assert take(queue, book, 10)[0] == []
    assert 59 < queue.next_start_in <= 60


def test_the_concurrency_is_fleet_wide_and_places_come_back_at_ack(server):
    queue = make_queue(server, {"CONCURRENT_REQUESTS_PER_DOMAIN": 2})
    push(queue, *(f"http://a/{n}" for n in range(5)))
    one, two = LeaseBook(server, KEY, "w1", 30), LeaseBook(server, KEY, "w2", 30)
    got1, lease1 = take(queue, one, 1)
    got2, _ = take(queue, two, 10)
    assert len(got1) == 1 and len(got2) == 1  # two in flight: the cap
    assert take(queue, two, 10)[0] == [] and queue.next_start_in is None
    one.release([(lease1, [1])])  # a download ended
    assert slot_state(server, "a")[1] == 1
    got3, _ = take(queue, two, 10)
    assert urls(queue, got3) == ["http://a/2"]


def test_a_dead_workers_leases_come_back_with_their_places(server):
    queue = make_queue(server, {"CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    push(queue, "http://a/1", "http://a/2")
    dead = LeaseBook(server, KEY, "dead", 0.05)
    got, _ = take(queue, dead, 10)
    assert urls(queue, got) == ["http://a/1"]
    live = LeaseBook(server, KEY, "live", 30)
    assert take(queue, live, 10)[0] == []  # the dead one holds a's place
    deadline = time.monotonic() + 10
    while live.recover_expired().requeued == 0:
        assert time.monotonic() < deadline
    assert slot_state(server, "a")[1] == 0
    back, _ = take(queue, live, 10)
    assert urls(queue, back) == ["http://a/1"]  # back first: its place in the slot kept


def test_a_graceful_give_back_returns_the_places_and_the_requests(server):
    queue = make_queue(server, {"CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    push(queue, "http://a/1", "http://a/2")
    book = LeaseBook(server, KEY, "w1", 30)
    _, lease = take(queue, book, 10)
    assert book.give_back_entries([(lease, [1])]) == 1
    assert slot_state(server, "a")[1] == 0 and len(queue) == 2
    again, _ = take(queue, book, 10)
    assert urls(queue, again) == ["http://a/1"]


def test_dead_letters_go_back_to_their_slot(server):
    from scrapy_redis.deadletters import dead_letters, requeue_dead_letters

    queue = make_queue(server)
    push(queue, "http://a/1")
    book = LeaseBook(server, KEY, "w1", 0.05, max_deliveries=1)
    take(queue, book, 10)
    deadline = time.monotonic() + 10
    while LeaseBook(server, KEY, "w2", 30, max_deliveries=1).recover_expired().dead_lettered == 0:
        assert time.monotonic() < deadline
    assert len(dead_letters(server, KEY)) == 1 and len(queue) == 0
    assert slot_state(server, "a")[1] == 0
    assert requeue_dead_letters(server, KEY) == 1
    got, _ = take(queue, LeaseBook(server, KEY, "w3", 30), 10)
    assert urls(queue, got) == ["http://a/1"]


def test_push_new_checks_fingerprints_and_is_applied_once(server):
    queue = make_queue(server)
    candidates = [
        Candidate(f"{n:040x}", queue.encode(Request(f"http://h{n % 2}/{n}"))) for n in range(4)
    ]
    write = queue.writes.take()
    assert queue.push_new(candidates, "polite:dupefilter", write=write) == [True] * 4
    assert queue.push_new(candidates, "polite:dupefilter", write=write) == [True] * 4  # resent
    assert len(queue) == 4
    assert queue.push_new(candidates[:1], "polite:dupefilter") == [False]
    assert {member_slot(m) for m in queued_members(server, KEY)} == {"h0", "h1"}


def test_slot_limits_as_scrapy_computes_them():
    spider = make_spider(
        {
            "DOWNLOAD_DELAY": 2,
            "CONCURRENT_REQUESTS_PER_DOMAIN": 3,
            "DOWNLOAD_SLOTS": {"b": {"delay": 0.5, "concurrency": 1, "randomize_delay": False}},
        }
    )
    limits = SlotLimits(spider.crawler.settings, spider)
    assert limits.slot_of(Request("http://A.example:81/x")) == "a.example"
    assert limits.slot_of(Request("http://a/", meta={"download_slot": "s"})) == "s"
    assert limits.of("a").arg() == [2000, 3, 0.5]
    assert limits.of("b").arg() == [500, 1, 0.0]
    spider.download_delay = 1.5
    assert SlotLimits(spider.crawler.settings, spider).of("a").arg() == [1500, 3, 0.5]


def test_randomized_delays_stay_within_half_and_one_and_a_half_times(server):
    queue = make_queue(server, {"DOWNLOAD_DELAY": 10})
    for n in range(20):
        push(queue, f"http://s{n}/1", f"http://s{n}/2")
    take(queue, LeaseBook(server, KEY, "w", 30), 100)
    waits = sorted(s for _, s in server.zrange(slot_queue_keys(KEY)[2], 0, -1, withscores=True))
    now = server.time()
    now_ms = now[0] * 1000 + now[1] // 1000
    spread = [w - now_ms for w in waits]
    assert len(spread) == 20
    assert spread[0] >= 4000 and spread[-1] <= 15000
    assert spread[-1] - spread[0] > 1000  # random, not one value


def test_a_persisted_crawl_in_todays_layout_is_carried_over(server, schedulers):
    spider = make_spider({"SCHEDULER_FLEET_LIMITS": True})
    legacy = PriorityQueue(server, spider, KEY)
    legacy.push_entries([legacy.encode(Request(f"http://h/{n}", priority=n % 2)) for n in range(6)])

    class Fake:
        crawler = spider.crawler
        serializer = None
        worker_timeout = 30

    Fake.server = server
    queue = fleet_queue(Fake, spider, legacy)
    assert isinstance(queue, SlotQueue)
    got, _ = take(queue, LeaseBook(server, KEY, "w", 30), 100)
    expected = ["http://h/1", "http://h/3", "http://h/5", "http://h/0", "http://h/2"]
    assert urls(queue, got) == [*expected, "http://h/4"]  # the order kept
    assert len(legacy) == 0 and len(queue) == 0
    assert server.hlen(f"{KEY}:leases") == 1  # the mover's leases released


def test_turning_the_setting_off_on_per_slot_data_names_the_setting(server):
    queue = make_queue(server)
    push(queue, "http://a/1")
    spider = make_spider({})

    class Fake:
        crawler = spider.crawler

    Fake.server = server
    with pytest.raises(ConfigurationError, match="SCHEDULER_FLEET_LIMITS = True"):
        fleet_queue(Fake, spider, PriorityQueue(server, spider, KEY))


def test_a_late_start_pushes_the_slots_next_start_back(server):
    queue = make_queue(server, {"DOWNLOAD_DELAY": 0.3, "RANDOMIZE_DOWNLOAD_DELAY": False})
    push(queue, "http://a/1", "http://a/2")
    book = LeaseBook(server, KEY, "w1", 30)
    take(queue, book, 10)
    time.sleep(0.1)  # the worker is slow to start it (the scenario, not a wait for an event)
    assert 0.29 <= queue.started("a") <= 0.3  # counted from now, not from the pop
    assert take(queue, book, 10)[0] == []
    assert 0.25 < queue.next_start_in <= 0.3
    assert queue.started("unknown") == 0


def test_the_report_of_a_start_keeps_a_retry_after_that_came_before_it(server):
    # The first request of a slot in a worker reports its start when it leaves the
    # downloader: after its response, whose Retry-After already held the slot.
    queue = make_queue(server, {"DOWNLOAD_DELAY": 0.1, "RANDOMIZE_DOWNLOAD_DELAY": False})
    queue.reports_starts = True
    push(queue, "http://a/1", "http://a/2")
    book = LeaseBook(server, KEY, "w1", 30)
    assert len(take(queue, book, 10)[0]) == 1
    queue.retry_after("a", 5)  # its response: a 429 asking for 5 s
    assert 4.5 < queue.started("a") <= 5  # the report comes after: the hold stays
    assert take(queue, book, 10)[0] == []
    assert 4.5 < queue.next_start_in <= 5


def test_a_slot_waits_for_the_report_of_its_last_start(server):
    queue = make_queue(server, {"DOWNLOAD_DELAY": 0.2, "RANDOMIZE_DOWNLOAD_DELAY": False})
    queue.reports_starts = True
    push(queue, "http://a/1", "http://a/2", "http://a/3")
    book = LeaseBook(server, KEY, "w1", 30)
    take(queue, book, 10)
    popped = time.monotonic()
    deadline = popped + 0.6
    while time.monotonic() < deadline:  # not reported: a waits, up to the grace of 3 s
        assert take(queue, book, 10)[0] == []
        assert queue.next_start_in <= 0.2
        time.sleep(0.02)
    assert 0.19 <= queue.started("a") <= 0.2  # the start: the next one a delay after it
    assert take(queue, book, 10)[0] == []
    got = []
    while not got:
        got, _ = take(queue, book, 10)
        assert time.monotonic() - popped < 5
    assert urls(queue, got) == ["http://a/2"]
    assert time.monotonic() - popped >= 0.79
    deadline = time.monotonic() + 8
    while not take(queue, book, 10)[0]:  # never reported: counted from the pop after 3 s
        assert time.monotonic() < deadline


def test_an_earlier_download_ending_does_not_end_the_wait_for_a_later_report(server):
    """Two downloads of a slot in flight: the first ending (its lease released) must not
    count the second's start as reported; else the slot's next start came its delay after
    the second's pop, and a worker slow to send the second (a busy machine) brought two
    requests to the site together (AutoThrottle e2e: 0.004 s apart, delay >= 0.2)."""
    queue = make_queue(server, {"DOWNLOAD_DELAY": 0.2, "RANDOMIZE_DOWNLOAD_DELAY": False})
    queue.reports_starts = True
    push(queue, "http://a/1", "http://a/2", "http://a/3")
    one, two = LeaseBook(server, KEY, "w1", 30), LeaseBook(server, KEY, "w2", 30)
    first, lease1 = take(queue, one, 1)
    queue.started("a")
    deadline = time.monotonic() + 5
    second: list = []
    while not second:  # a/2, a delay after a/1's start
        second, _ = take(queue, two, 1)
        assert time.monotonic() < deadline
    assert urls(queue, first + second) == ["http://a/1", "http://a/2"]
    one.release([(lease1, [1])])  # a/1 done; a/2's start is not reported yet
    popped = time.monotonic()
    while time.monotonic() < popped + 0.6:  # not reported: a waits (up to the grace)
        assert take(queue, one, 10)[0] == []
        time.sleep(0.02)
    assert 0.19 <= queue.started("a") <= 0.2  # the next start: a delay after the report


def test_purge_deletes_the_per_slot_queues_with_their_leases(server):
    from scrapy_redis.fleet.operations import purge_queue

    queue = make_queue(server)
    push(queue, "http://a/1", "http://b/1")
    take(queue, LeaseBook(server, KEY, "w1", 30), 1)
    assert server.exists(*slot_queue_keys(KEY), f"{KEY}:leases") == 5  # none waits
    purge_queue(server, KEY)
    assert server.keys("polite:*") == []


def fleet_settings(url: str, **extra) -> dict:
    return {
        "REDIS_URL": url,
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        "SCHEDULER_FLEET_LIMITS": True,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        **extra,
    }


def enqueue_hosts(scheduler, hosts: int, pages: int) -> list[str]:
    urls = [f"http://h{h}.example/{p}" for p in range(pages) for h in range(hosts)]
    for url in urls:
        scheduler.enqueue_request(Request(url))
    assert scheduler.send_enqueued()
    return urls


def lanes_of_slots(scheduler) -> dict[str, set[int]]:
    """Per slot, the lanes its queued requests are in."""
    found: dict[str, set[int]] = {}
    for number, lane in enumerate(scheduler.queue.lanes):
        for member in queued_members(lane.server, lane.key, lane.on_cluster):
            found.setdefault(member_slot(member), set()).add(number)
    return found


def test_a_split_crawl_keeps_each_slot_in_one_lane_and_its_limits(redis_url, server, schedulers):
    first = schedulers(fleet_settings(redis_url, SCHEDULER_SHARDS=4, SCHEDULER_PERSIST=True))
    second = schedulers(fleet_settings(redis_url, SCHEDULER_SHARDS=4, SCHEDULER_PERSIST=True))
    urls = enqueue_hosts(first, 12, 3)
    spread = lanes_of_slots(first)
    assert len(spread) == 12 and all(len(lanes) == 1 for lanes in spread.values())
    assert len({lane for lanes in spread.values() for lane in lanes}) > 1  # spread over lanes
    taken = [r.url for r in iter(first.next_request, None)]
    taken += [r.url for r in iter(second.next_request, None)]
    assert sorted(taken) == sorted(f"http://h{h}.example/0" for h in range(12))  # one each
    first.close("finished")  # gives back its places and requests
    rest = [r.url for r in iter(second.next_request, None)]
    assert len(rest) > 0 and len(taken) + len(rest) <= len(urls)


def test_a_split_crawl_on_the_cluster(redis_cluster, cluster, schedulers):
    settings = fleet_settings(redis_cluster.url, SCHEDULER_PERSIST=True)
    scheduler = schedulers(settings)
    assert len(scheduler.queue.lanes) == 3  # a lane per master
    enqueue_hosts(scheduler, 9, 2)
    spread = lanes_of_slots(scheduler)
    assert all(len(lanes) == 1 for lanes in spread.values()) and len(spread) == 9
    taken = [r.url for r in iter(scheduler.next_request, None)]
    assert sorted(taken) == sorted(f"http://h{h}.example/0" for h in range(9))
    scheduler.close("finished")
    other = schedulers(settings)
    again = [r.url for r in iter(other.next_request, None)]
    assert len(again) == 9  # what the first gave back, one per slot
    other.flush()


def test_a_retry_after_holds_the_slot_for_every_worker(server):
    queue = make_queue(server)
    push(queue, "http://a/1", "http://a/2", "http://b/1")
    book = LeaseBook(server, KEY, "w1", 30)
    take(queue, book, 1)  # a/1
    queue.retry_after("a", 30)
    got, _ = take(queue, LeaseBook(server, KEY, "w2", 30), 10)
    assert urls(queue, got) == ["http://b/1"]  # b is not held up
    assert 29 < queue.next_start_in <= 30
    assert slot_state(server, "a")[9] > 0  # slowed until (for the status)


def test_autothrottle_sets_one_delay_per_slot_by_scrapys_rules(server):
    from scrapy_redis.politeness.limits import Throttle

    settings = {
        "AUTOTHROTTLE_ENABLED": True,
        "AUTOTHROTTLE_START_DELAY": 1.0,
        "AUTOTHROTTLE_MAX_DELAY": 4.0,
        "AUTOTHROTTLE_TARGET_CONCURRENCY": 2.0,
        "DOWNLOAD_DELAY": 0.25,
    }
    queue = make_queue(server, settings)
    throttle = queue.limits.throttle
    assert throttle == Throttle(0.25, 4.0, 2.0)
    push(queue, "http://a/1")
    assert slot_state(server, "a")[2] == 1000  # AUTOTHROTTLE_START_DELAY
    # target = 3 / 2 = 1.5; new = max(1.5, (1 + 1.5) / 2) = 1.5
    assert queue.latency("a", 3.0, True, throttle) == 1.5
    # target 0.1: new = max(0.1, 0.8) = 0.8
    assert queue.latency("a", 0.2, True, throttle) == 0.8
    assert queue.latency("a", 0.2, False, throttle) == 0.8  # not 200: never lower
    assert queue.latency("a", 20.0, False, throttle) == 4.0  # higher, at most MAX
    assert queue.latency("a", 0.0, True, throttle) == 2.0
    assert queue.latency("a", 0.0, True, throttle) == 1.0
    for _ in range(5):
        queue.latency("a", 0.0, True, throttle)
    assert slot_state(server, "a")[2] == 250  # at least DOWNLOAD_DELAY
    push(queue, "http://a/2")  # a push keeps the delay AutoThrottle set
    assert slot_state(server, "a")[2] == 250
    assert queue.latency("unknown", 1.0, True, throttle) == -0.001


@pytest.mark.parametrize(
    ("status", "header", "expected"),
    [
        (429, "7", 7.0),
        (503, "1.5", 1.5),
        (200, "7", 0.0),
        (429, None, 0.0),
        (429, "soon", 0.0),
        (503, "999999", 3600.0),
    ],
)
def test_retry_after_is_read_from_429_and_503(status, header, expected):
    from scrapy.http import Response

    from scrapy_redis.politeness.pacing import retry_after

    headers = {"Retry-After": header} if header else {}
    assert retry_after(Response("http://a/", status=status, headers=headers)) == expected


def test_retry_after_as_an_http_date():
    from datetime import datetime, timedelta, timezone
    from email.utils import format_datetime

    from scrapy.http import Response

    from scrapy_redis.politeness.pacing import retry_after

    when = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=60), usegmt=True)
    assert 55 < retry_after(Response("http://a/", status=429, headers={"Retry-After": when})) <= 60


def test_a_crawl_delay_is_the_slots_least_delay(server):
    queue = make_queue(server, {"DOWNLOAD_DELAY": 0.1})  # randomized: 0.05 to 0.15
    push(queue, "http://a/1", "http://a/2")
    queue.crawl_delay("a", 20)
    take(queue, LeaseBook(server, KEY, "w1", 30), 10)
    assert take(queue, LeaseBook(server, KEY, "w2", 30), 10)[0] == []
    assert 19 < queue.next_start_in <= 20


def test_status_counts_the_per_slot_queues_and_names_no_shared_delay(redis_url, server, schedulers):
    from scrapy.settings import Settings

    from helpers import DemoSpider
    from scrapy_redis.fleet.status import crawl_status

    settings = fleet_settings(redis_url, DOWNLOAD_DELAY=1, SCHEDULER_PERSIST=True)
    first, _second = schedulers(settings), schedulers(settings)  # two workers alive
    enqueue_hosts(first, 3, 4)
    status = crawl_status(server, Settings(settings), DemoSpider)
    assert status.queued == 12
    assert status.diagnosis is None or "times the configured rate" not in status.diagnosis
    off = {**settings, "SCHEDULER_FLEET_LIMITS": False}
    line = crawl_status(server, Settings(off), DemoSpider).diagnosis
    assert line is not None and "2 workers each apply DOWNLOAD_DELAY = 1" in line
    assert "up to 2 times the configured rate" in line and "SCHEDULER_FLEET_LIMITS = True" in line


def test_scrapy_redis_status_shows_the_busiest_slots(tmp_path, redis_url, server, schedulers):
    from test_commands import write_project

    settings = fleet_settings(redis_url, DOWNLOAD_DELAY=30, SCHEDULER_PERSIST=True)
    scheduler = schedulers(settings)
    enqueue_hosts(scheduler, 2, 3)
    scheduler.enqueue_request(Request("http://h1.example/extra"))
    assert scheduler.send_enqueued()
    assert scheduler.next_request() is not None  # h0 and h1 start one each: 30 s to wait
    project = write_project(tmp_path, redis_url)
    settings_py = project.path / "proj" / "settings.py"
    settings_py.write_text(settings_py.read_text() + "SCHEDULER_FLEET_LIMITS = True\n")
    text = project.run("status").stdout
    assert text.startswith("demo (SlotQueue demo:requests) in ")  # queued per slot
    assert "  queue        5 queued, 2 leased" in text
    slots = [line for line in text.splitlines() if line.startswith("  slot ")]
    assert slots[0].startswith("  slot         h1.example: 3 queued, 1 in flight (of 1), 1 started")
    assert "delay 30 s, next start in " in slots[0] and "next start in 0.0 s" not in slots[0]
    assert slots[1].startswith("  slot         h0.example: 2 queued, 1 in flight (of 1)")
    assert '"slot": "h1.example"' in project.run("status", "--json").stdout


def test_metrics_and_the_dashboards_status_show_the_slots(redis_url, server, schedulers):
    from scrapy.settings import Settings

    from helpers import DemoSpider
    from scrapy_redis.dashboard import metrics
    from scrapy_redis.fleet.status import crawl_status

    settings = fleet_settings(redis_url, DOWNLOAD_DELAY=30)
    scheduler = schedulers(settings)
    enqueue_hosts(scheduler, 2, 3)
    assert scheduler.next_request() is not None  # one start per slot: 30 s to wait
    status = crawl_status(server, Settings(settings), DemoSpider).to_json()  # /api/status
    assert {slot["slot"] for slot in status["slots"]} == {"h0.example", "h1.example"}
    samples = metrics.render([status]).splitlines()
    assert 'scrapy_redis_slot_queued{spider="demo",slot="h1.example"} 2' in samples
    assert 'scrapy_redis_slot_in_flight{spider="demo",slot="h0.example"} 1' in samples
    assert 'scrapy_redis_slot_delay_seconds{spider="demo",slot="h0.example"} 30.0' in samples
    waits = [s for s in samples if s.startswith("scrapy_redis_slot_next_start_seconds{")]
    assert len(waits) == 2 and all(float(s.rsplit(" ", 1)[1]) > 0 for s in waits)
    assert 'scrapy_redis_slot_starts_total{spider="demo",slot="h0.example"} 1' in samples
    rates = [s for s in samples if s.startswith("scrapy_redis_slot_rate{")]
    assert len(rates) == 2 and all(float(s.rsplit(" ", 1)[1]) > 0 for s in rates)


def test_a_slots_fleet_rate_counts_the_starts_of_the_last_minute(server):
    """The fleet's rate of a slot: its starts a second over the sliding last minute, from
    the starts the pop script counts per minute of the server's clock."""
    from scrapy_redis.politeness.report import fleet_rate, slot_views

    queue = make_queue(server, {"CONCURRENT_REQUESTS_PER_DOMAIN": 100})  # all at once
    seconds, _ = server.time()
    push(queue, *(f"http://a/{n}" for n in range(30)))
    assert len(take(queue, LeaseBook(server, KEY, "w1", 30), 30)[0]) == 30
    state = slot_state(server, "a")
    assert state[14] in (seconds // 60, seconds // 60 + 1) and state[15] == 30  # its minute
    since = state[17]  # the first start counted: the take, on the server's clock
    assert seconds * 1000 <= since < seconds * 1000 + 60000
    minute = 60000 * state[14]
    [view] = slot_views(server, [KEY], False, (since + 10000) / 1000)
    assert view["rate"] == 2.9  # a slot counting for 10 s: 29 gaps in 10 s, not 30 in 60
    assert fleet_rate(state, since + 500) == 29.0  # (over a second at least)
    assert fleet_rate([*state[:15], 1, 0, since], since + 4000) == 0.25  # one start: 1 / 4
    assert fleet_rate(state, minute + 120000) == 0.0  # two minutes on: none
    old = state[:17]  # counting for more than a minute (or a state before field 18)
    assert fleet_rate(old, minute + 59999) == 0.5  # 30 in the last minute
    assert fleet_rate(old, minute + 60000 + 15000) == round(30 * 0.75 / 60, 3)  # 45 s left
    now = minute + 30000  # half of the minute before is within the last 60 s
    assert fleet_rate([*state[:14], state[14], 6, 60], now) == 0.6  # (6 + 60 / 2) / 60
    assert fleet_rate([*state[:14], state[14] - 1, 6, 60], now) == 0.05  # 6 / 2 / 60
    assert fleet_rate([*state[:14], state[14], 6, 60, now - 60001], now) == 0.6


def test_a_crawl_queued_per_slot_moves_into_the_clusters_lanes_whatever_its_limits(
    redis_url, server, redis_cluster, cluster, schedulers, capsys
):
    from scrapy_redis.move_crawl import main

    kept = fleet_settings(redis_url, DOWNLOAD_DELAY=60, SCHEDULER_PERSIST=True)
    scheduler = open_scheduler_closed_after(kept, 5, 4)  # 20 queued, slots waiting 60 s
    assert len(scheduler.queue) == 20
    moved = ["-s", "SCHEDULER_FLEET_LIMITS=True", "-s", "CONCURRENT_REQUESTS_PER_DOMAIN=1"]
    assert (
        main(["demo", "--from", redis_url, "--to", redis_cluster.url, "--delete-source", *moved])
        == 0
    )
    assert "Moved 20 requests" in capsys.readouterr().out
    assert server.keys("*") == []
    target = schedulers(fleet_settings(redis_cluster.url, SCHEDULER_PERSIST=True))
    spread = lanes_of_slots(target)
    assert len(spread) == 5 and all(len(lanes) == 1 for lanes in spread.values())
    taken = [r.url for r in iter(target.next_request, None)]
    assert sorted(taken) == sorted(f"http://h{h}.example/0" for h in range(5))  # order kept
    target.flush()


def open_scheduler_closed_after(settings: dict, hosts: int, pages: int):
    from helpers import open_scheduler

    scheduler = open_scheduler(settings)
    enqueue_hosts(scheduler, hosts, pages)
    assert scheduler.next_request() is not None  # some slots started: they wait now
    scheduler.close("shutdown")  # gives back what it took
    scheduler.stop_timers()
    return scheduler


@pytest.mark.filterwarnings("ignore::scrapy.exceptions.ScrapyDeprecationWarning")  # >= 2.14
def test_under_concurrent_requests_per_ip_the_slot_is_the_ip_once_resolved():
    from scrapy.resolver import dnscache

    spider = make_spider({"CONCURRENT_REQUESTS_PER_IP": 3, "CONCURRENT_REQUESTS_PER_DOMAIN": 8})
    limits = SlotLimits(spider.crawler.settings, spider)
    assert limits.slot_of(Request("http://unresolved.example/")) == "unresolved.example"
    dnscache["resolved.example"] = "192.0.2.7"
    try:
        assert limits.slot_of(Request("http://resolved.example/")) == "192.0.2.7"  # as Scrapy
    finally:
        del dnscache["resolved.example"]
    assert limits.of("192.0.2.7").concurrency == 3  # CONCURRENT_REQUESTS_PER_IP


def test_a_worker_leases_what_its_downloader_has_room_for():
    from scrapy_redis.politeness.pacing import PolitePacing
    from scrapy_redis.scheduling.pacing import Pacer

    spider = make_spider({"CONCURRENT_REQUESTS": 10})

    class Downloader:
        active = {1, 2, 3}
        slots: dict = {}

        def get_slot_key(self, request):
            return "a"

    pacing = PolitePacing(Pacer(prefetch=128), spider.crawler, spider)
    pacing.downloader = Downloader()
    assert pacing.batch_size() == 7  # CONCURRENT_REQUESTS - running downloads
    Downloader.active = set(range(12))
    assert pacing.batch_size() == 1
    assert PolitePacing(Pacer(prefetch=4), spider.crawler, spider).batch_size() == 4  # no engine


def test_a_worker_leases_ahead_at_its_hand_out_rate_when_its_downloader_is_full():
    from scrapy_redis.politeness.pacing import PolitePacing
    from scrapy_redis.scheduling.pacing import Pacer

    spider = make_spider({"CONCURRENT_REQUESTS": 16})

    class Downloader:
        active = set(range(15))  # room for 1: one pop a page, without leasing ahead
        slots: dict = {}

    clock = [100.0]
    pacing = PolitePacing(Pacer(prefetch=128, clock=lambda: clock[0]), spider.crawler, spider)
    pacing.downloader = Downloader()
    assert pacing.batch_size() == 1 and pacing.room() == 1
    pacing.popped(8)
    clock[0] += 0.05  # 8 handed out in 50 ms: 40 in BATCH_HORIZON, at most twice the last
    assert pacing.batch_size() == 16
    assert pacing.room() == 1  # what the pop may take of slots that limit something


def test_beyond_the_workers_room_a_pop_takes_only_slots_that_limit_nothing(server):
    def queue_of(name: str, settings: dict, room: int) -> tuple[SlotQueue, LeaseBook]:
        queue = SlotQueue(server, make_spider({"DOWNLOAD_DELAY": 0, **settings}), name)
        queue.room = lambda: room
        return queue, LeaseBook(server, name, "w1", 30)

    free, book = queue_of("free", {"CONCURRENT_REQUESTS_PER_DOMAIN": 1000}, 2)
    push(free, *(f"http://free/{n}" for n in range(20)))
    entries, _ = take(free, book, 10)
    assert len(entries) == 10  # 2 of its room, 8 ahead: the slot limits nothing
    capped, book = queue_of("capped", {"CONCURRENT_REQUESTS_PER_DOMAIN": 4}, 2)
    push(capped, *(f"http://capped/{n}" for n in range(20)))
    entries, _ = take(capped, book, 10)
    # its room, no more: a third would hold more than half its fleet-wide places
    assert urls(capped, entries) == ["http://capped/0", "http://capped/1"]
    settings = {"DOWNLOAD_DELAY": 5, "CONCURRENT_REQUESTS_PER_DOMAIN": 1000}
    slow, book = queue_of("slow", settings, 1)
    push(slow, "http://slow/1", priority=9)
    push(slow, "http://slow2/1", priority=5)
    slow.limits = SlotLimits(make_spider({"DOWNLOAD_DELAY": 0}).crawler.settings, slow.spider)
    push(slow, *(f"http://more/{n}" for n in range(5)))
    entries, _ = take(slow, book, 10)
    # its room taken by the most urgent slot; the next has a delay: it is not taken
    # ahead of need, nor anything behind it
    assert urls(slow, entries) == ["http://slow/1"]
