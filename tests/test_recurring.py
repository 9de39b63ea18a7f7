"""Recurring start messages (issue 27.3): the pop script claims a run once per interval
across the fleet, a worker dying with it makes it due again, the spiders serve runs
unfiltered, ``scrapy redis push --every`` / ``--cancel`` and ``status`` (real
redis-server; the e2e test with real workers is in test_recurring_e2e.py)."""

from __future__ import annotations

import json
import re
import time

import pytest

from scrapy_redis.exceptions import InvalidStartMessageError
from scrapy_redis.fleet.recurring import cancel_recurring, push_recurring
from scrapy_redis.start.recurring import RecurringMessages, message_every, parse_every
from scrapy_redis.store.scripts import script
from test_spiders import make, urls

START = "myspider:start_urls"
URL = "https://example.com/feed"


def server_ms(server) -> int:
    seconds, micros = server.time()
    return seconds * 1000 + micros // 1000


def pop(server, worker: str = "w", count: int = 10, first: int = 1, timeout_ms: int = 60000):
    """One call of the pop script, as a spider with the default start key makes it."""
    recurring = RecurringMessages(server, START)
    keys = [f"{START}:leases", f"{START}:lease_deadlines", START, *recurring.keys]
    return script("pop_start_messages")(
        server, keys, ["list", count, 0, timeout_ms, f"{worker}:", first, 1]
    )


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        (3600, 3600),
        (2.5, 2.5),
        ("90", 90),
        ("90s", 90),
        ("30m", 1800),
        ("1h", 3600),
        ("2D", 172800),
    ],
)
def test_intervals(given, seconds):
    assert parse_every(given) == seconds


@pytest.mark.parametrize(
    "given", [0, 0.5, -3, "1x", "", "h", True, None, [], float("inf"), 1e10, "20000d"]
)
def test_invalid_intervals_name_the_key(given):
    """Between 1 s and 1e9 s (31 years): the pop script drops a longer one, set by hand."""
    with pytest.raises(InvalidStartMessageError, match="'every' must be seconds from 1 to 1e"):
        parse_every(given)


def test_which_messages_recur():
    assert message_every(json.dumps({"url": URL, "every": "1h"})) == 3600
    assert message_every(json.dumps({"url": URL})) is None
    assert message_every(URL) is None
    assert message_every(b"{not json") is None


def test_a_due_message_is_claimed_once_and_its_next_run_set(server):
    RecurringMessages(server, START).add([URL], every=2)
    before = server_ms(server)
    reply = pop(server, "w1")
    assert reply == [2, URL.encode()]  # index: the start keys' count + 1
    # its lease puts the run back if the worker dies; its next run is one interval on
    assert server.hlen(f"{START}:leases") == 1
    next_run = server.zscore(f"{START}:recurring", URL)
    assert before + 2000 - 50 <= next_run <= before + 2000 + 50
    # another worker polling now gets nothing: one run per interval across the fleet
    assert pop(server, "w2") == [0]


def test_a_late_run_keeps_the_schedule(server):
    """Runs stay on the grid first run + n intervals: a run claimed late does not bring
    the next one nearer, and runs missed while no worker polled are not caught up."""
    recurring = RecurringMessages(server, START)
    recurring.add([URL], every=10)
    now = server_ms(server)
    server.zadd(f"{START}:recurring", {URL: now - 35_000})  # 3.5 intervals late
    assert pop(server) == [2, URL.encode()]
    assert server.zscore(f"{START}:recurring", URL) == now - 35_000 + 40_000


def test_a_worker_dying_with_a_run_makes_it_due_again(server):
    from scrapy_redis.queues.leases import LeaseBook

    RecurringMessages(server, START).add([URL], every=3600)
    assert pop(server, "dead", timeout_ms=1) == [2, URL.encode()]
    assert server.zscore(f"{START}:recurring", URL) > server_ms(server) + 3_000_000
    deadline = time.monotonic() + 10
    while server_ms(server) <= server.zscore(f"{START}:lease_deadlines", "dead:1"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    recovery = LeaseBook(server, START, "alive", 60).recover_expired()
    assert recovery.requeued == 1
    assert server.zscore(f"{START}:recurring", URL) <= server_ms(server)
    assert pop(server, "alive") == [2, URL.encode()]


def test_a_run_given_back_at_close_is_due_again_but_not_if_cancelled(server):
    from scrapy_redis.queues.leases import LeaseBook

    RecurringMessages(server, START).add([URL, URL + "2"], every=3600)
    book = LeaseBook(server, START, "w", 60)
    book.held.update({"w:1", "w:2"})
    assert pop(server) == [2, URL.encode(), (URL + "2").encode()]
    assert cancel_recurring(server, START, [URL + "2"]) == 1
    assert book.give_back(["w:1", "w:2"]) == 2
    assert server.zrange(f"{START}:recurring", 0, -1) == [URL.encode()]
    assert server.zscore(f"{START}:recurring", URL) <= server_ms(server)


def test_a_retried_pop_answers_the_runs_it_claimed(server):
    RecurringMessages(server, START).add([URL], every=3600)
    assert pop(server) == pop(server) == [2, URL.encode()]
    assert server.hlen(f"{START}:leases") == 1


def test_runs_come_before_the_start_key_and_alone(server):
    server.rpush(START, "https://example.com/once")
    RecurringMessages(server, START).add([URL], every=3600)
    assert pop(server, first=1) == [2, URL.encode()]
    assert pop(server, first=2) == [1, b"https://example.com/once"]


def test_a_member_without_interval_is_dropped(server):
    server.zadd(f"{START}:recurring", {URL: 0})  # written by hand
    assert pop(server) == [0]
    assert not server.exists(f"{START}:recurring")


def test_values_written_by_hand_break_neither_the_pop_nor_the_status(settings_dict, server):
    """Redis holds untrusted input: a score of -inf, intervals that are no number."""
    from scrapy.settings import Settings

    from scrapy_redis.commands.verbs.status import render
    from scrapy_redis.fleet.status import crawl_status
    from test_spiders import MySpider

    server.zadd(f"{START}:recurring", {"https://a.test/": "-inf", "https://b.test/": 0})
    server.zadd(f"{START}:recurring", {"https://c.test/": "+inf", "https://d.test/": 0})
    server.hset(f"{START}:recurring:every", mapping={"https://a.test/": 60_000})
    server.hset(f"{START}:recurring:every", mapping={"https://b.test/": "inf"})
    server.hset(
        f"{START}:recurring:every", mapping={"https://c.test/": "x", "https://d.test/": "nan"}
    )
    # 1 ms: due at every pop, it would starve the start keys; dropped as push refuses it
    server.zadd(f"{START}:recurring", {"https://e.test/": 0})
    server.hset(f"{START}:recurring:every", mapping={"https://e.test/": 1})
    status = crawl_status(server, Settings(settings_dict), MySpider)
    assert json.loads(json.dumps(status.to_json(), allow_nan=False))["recurring"] == 5
    lines = render(status)
    assert "    in ?         every 1m     https://a.test/" in lines
    assert "    due now      every ?      https://b.test/" in lines
    assert "    in ?         every ?      https://c.test/" in lines
    assert pop(server) == [2, b"https://a.test/"]
    assert server.zrange(f"{START}:recurring", 0, -1) == [b"https://a.test/", b"https://c.test/"]
    assert server.zscore(f"{START}:recurring", "https://a.test/") > server_ms(server)


def test_adding_again_keeps_the_next_run_and_takes_the_interval(server):
    recurring = RecurringMessages(server, START)
    assert recurring.add([URL], every=60, first_in=30) == 1
    next_run = server.zscore(f"{START}:recurring", URL)
    assert recurring.add([URL], every=120) == 0
    assert server.zscore(f"{START}:recurring", URL) == next_run
    [listed] = recurring.listed()
    assert (listed.message, listed.every) == (URL, 120)
    assert listed.next_run == pytest.approx(next_run / 1000)
    assert recurring.count() == 1 and recurring.next_run() == pytest.approx(next_run / 1000)


# -- the spiders ----------------------------------------------------------------------------


def test_a_spider_serves_runs_unfiltered_and_one_per_interval(settings_dict, server):
    spider = make(settings_dict)
    push_recurring(server, START, [URL], every=3600)
    [request] = spider.next_requests()
    assert request.url == URL and request.dont_filter
    spider._ack_start_messages()
    assert not server.exists(f"{START}:leases")
    assert spider.next_requests() == []  # the next run is an hour away
    assert spider.crawler.stats.get_value("redis/start_messages/recurring") == 1


def test_a_message_asking_to_recur_is_served_and_recurs(settings_dict, server):
    spider = make(settings_dict)
    message = json.dumps({"url": URL, "every": "1h", "meta": {"a": 1}})
    server.rpush(START, message)
    [request] = spider.next_requests()
    assert request.dont_filter and request.meta["a"] == 1
    assert request.method == "GET"  # "every" is no form data
    [listed] = RecurringMessages(server, START).listed()
    assert (listed.message, listed.every) == (message, 3600)
    assert listed.next_run > time.time() + 3500


def test_a_message_with_a_bad_interval_is_set_aside(settings_dict, server):
    spider = make(settings_dict)
    server.rpush(START, json.dumps({"url": URL, "every": "soon"}), "https://example.com/ok")
    assert urls(spider.next_requests()) == ["https://example.com/ok"]
    assert server.llen(f"{START}:invalid") == 1
    assert not server.exists(f"{START}:recurring")


def test_a_recurring_message_no_longer_valid_stops_recurring(settings_dict, server):
    spider = make(settings_dict)
    bad = json.dumps({"url": URL, "callback": "gone"})
    push_recurring(server, START, [bad], every=1)
    assert spider.next_requests() == []
    assert server.llen(f"{START}:invalid") == 1
    assert not server.exists(f"{START}:recurring")


def test_cancel_by_text_or_url(server):
    message = json.dumps({"url": URL, "every": 60})
    assert push_recurring(server, START, [message], every=None) == 1
    assert push_recurring(server, START, ["https://example.com/b"], every=60) == 1
    with pytest.raises(ValueError, match="has no 'every': give --every"):
        push_recurring(server, START, ["https://example.com/c"], every=None)
    assert RecurringMessages(server, START).count() == 2
    assert cancel_recurring(server, START, [URL]) == 1
    assert cancel_recurring(server, START, ["https://example.com/b"]) == 1
    assert cancel_recurring(server, START, [URL]) == 0
    assert not server.exists(f"{START}:recurring", f"{START}:recurring:every")


# -- the command, as a user runs it -----------------------------------------------------------


@pytest.fixture
def project(tmp_path, redis_url, server):
    from test_commands import write_project

    return write_project(tmp_path, redis_url)


def test_push_every_status_and_cancel(project, server):
    made = project.run("push", "demo", "--every", "1h", "http://a.test/feed")
    assert made.returncode == 0, made.stderr
    assert made.stdout == "Made 1 message recurring for demo, first run due now.\n"
    assert server.zscore("demo:start_urls:recurring", "http://a.test/feed") <= server_ms(server)
    assert not server.exists("demo:start_urls")  # served from the recurring set only
    own = json.dumps({"url": "http://a.test/sitemap", "every": "30m"})
    assert project.json("push", "demo", own, "http://a.test/once") == {
        "key": "demo:start_urls",
        "pushed": 1,
        "recurring": 1,
        "refused": [],
    }
    server.zadd("demo:start_urls:recurring", {own: server_ms(server) + 90_000}, xx=True)
    status = project.run("status", "demo").stdout
    assert "  recurring    2 (next run first)\n" in status
    assert "    due now      every 1h     http://a.test/feed\n" in status
    assert re.search(rf"\n    in 1m[0-3]\ds     every 30m    {re.escape(own)}\n", status), status
    [listed] = [s for s in project.json("status", "demo")["spiders"]]
    assert listed["recurring"] == 2
    assert [one["every"] for one in listed["recurring_next"]] == [3600, 1800]

    cancelled = project.run("push", "demo", "--cancel", "http://a.test/sitemap")
    assert (cancelled.returncode, cancelled.stdout) == (0, "Stopped 1 message recurring.\n")
    assert server.zrange("demo:start_urls:recurring", 0, -1) == [b"http://a.test/feed"]
    none = project.run("push", "demo", "--cancel", "http://a.test/sitemap")
    assert none.returncode == 1
    assert none.stderr == "No recurring message matched (scrapy redis status lists them).\n"


def test_push_refuses_a_bad_interval_in_one_line(project, server):
    bad = project.run("push", "demo", "--every", "soon", "http://a.test/feed")
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.strip().splitlines() == [
        "error: --every: it must be seconds from 1 to 1e+09 or a duration such as '30m', '1h', "
        "'2d', not 'soon'"
    ]
    keyed = project.run("push", "demo", "--every", "1h", "--key", "demo:start_urls", "http://a/")
    assert keyed.returncode == 2 and "--key does not apply to --every" in keyed.stderr
    own = project.run("push", "demo", json.dumps({"url": "http://a.test/", "every": 0}))
    assert own.returncode == 1
    assert "'every' must be seconds from 1 to 1e+09" in own.stderr
    assert not server.keys("demo:*")


def test_status_and_metrics_count_them_and_give_the_next_run(settings_dict, server):
    from scrapy.settings import Settings

    from scrapy_redis.dashboard import metrics
    from scrapy_redis.fleet.status import crawl_status
    from test_spiders import MySpider

    status = crawl_status(server, Settings(settings_dict), MySpider).to_json()
    assert (status["recurring"], status["recurring_next"]) == (0, [])
    samples = metrics.render([status]).splitlines()
    assert 'scrapy_redis_recurring{spider="myspider"} 0' in samples
    assert not [s for s in samples if s.startswith("scrapy_redis_recurring_next_run")]
    push_recurring(server, START, [URL, URL + "?b"], every=60)
    server.zadd(f"{START}:recurring", {URL: 1_800_000_000_500})
    status = crawl_status(server, Settings(settings_dict), MySpider).to_json()
    assert status["recurring"] == 2
    assert [one["message"] for one in status["recurring_next"]] == [URL + "?b", URL]
    samples = metrics.render([status]).splitlines()
    assert 'scrapy_redis_recurring{spider="myspider"} 2' in samples
    [next_run] = [s for s in samples if s.startswith("scrapy_redis_recurring_next_run")]
    assert float(next_run.split()[-1]) == pytest.approx(status["recurring_next"][0]["next_run"])
    assert float(next_run.split()[-1]) == pytest.approx(time.time(), abs=5)


# -- on a Redis Cluster -------------------------------------------------------------------


@pytest.mark.parametrize("redis_key", [None, ["{%(name)s}:high", "{%(name)s}:low"]])
def test_on_a_cluster_runs_are_served_in_the_start_keys_slot(redis_cluster, cluster, redis_key):
    from redis.crc import key_slot

    settings = {"REDIS_URL": redis_cluster.url}
    spider = make(settings) if redis_key is None else make(settings, redis_key=redis_key)
    first = spider.redis_start_messages.source.keys[0]
    recurring = RecurringMessages(cluster, first)
    slots = {key_slot(key.encode()) for key in [first, *recurring.keys]}
    assert len(slots) == 1, recurring.keys
    assert push_recurring(cluster, first, [URL], every=3600) == 1
    [request] = spider.next_requests()
    assert request.url == URL and request.dont_filter
    spider.redis_start_messages.give_back()  # a worker stopping before it scheduled them
    assert cluster.zscore(recurring.key, URL) <= time.time() * 1000
    [again] = spider.next_requests()
    assert again.url == URL
    assert spider.next_requests() == []  # acked; its next run is an hour away
    assert not cluster.exists(
        f"{{{first}}}:leases" if redis_key is None else "{myspider}:high:leases"
    )
    [listed] = recurring.listed()
    assert listed.next_run > time.time() + 3500
    assert cancel_recurring(cluster, first, [URL]) == 1


def idle_until_closed(spider) -> None:
    """Idle events until ``spider`` closes (no DontCloseSpider); fails after 10 s."""
    from scrapy.exceptions import DontCloseSpider

    deadline = time.monotonic() + 10
    while True:
        try:
            spider.spider_idle()
            return
        except DontCloseSpider:
            assert time.monotonic() < deadline, "the spider did not close"
            time.sleep(0.05)


def test_an_idle_spider_stays_open_for_a_run_due_within_max_idle_time(settings_dict, server):
    from scrapy.exceptions import DontCloseSpider

    from test_spiders import with_engine

    spider = make({**settings_dict, "MAX_IDLE_TIME_BEFORE_CLOSE": 0.2})
    with_engine(spider)
    idle_until_closed(spider)  # nothing due
    RecurringMessages(server, START).add([URL], every=3600, first_in=0.15)
    with pytest.raises(DontCloseSpider):
        spider.spider_idle()  # due within 0.2 s: stays open
    server.zadd(f"{START}:recurring", {URL: server_ms(server) + 3_000_000}, xx=True)
    idle_until_closed(spider)  # the next run an hour away: closes


def test_purge_start_deletes_the_recurring_messages(project, server):
    assert project.run("push", "demo", "--every", "1h", "http://a.test/").returncode == 0
    server.rpush("demo:start_urls", "http://b.test/")
    purged = project.run("purge", "demo", "--start", "--yes")
    assert purged.returncode == 0, purged.stderr
    assert not server.keys("demo:*")
