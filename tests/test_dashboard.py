"""The dashboard: its actions on a real Redis, /metrics, and its security rules, checked
with plain HTTP requests against a real ``python -m scrapy_redis.dashboard`` process."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import redis
from scrapy import Request
from scrapy.settings import Settings

from dashboard_process import EXAMPLE, MODULE, DashboardProcess, cookie_name, csrf_token, http
from helpers import DemoSpider, dying_worker, expire_leases, leased_entries
from redis_server import free_port
from scrapy_redis.dashboard import metrics
from scrapy_redis.dashboard.actions import push_start_messages, requeue_expired
from scrapy_redis.dashboard.fleet import Fleet
from scrapy_redis.dashboard.security import TOKEN_ENV
from scrapy_redis.exceptions import InvalidStartMessageError
from scrapy_redis.fleet.operations import purge_queue
from scrapy_redis.fleet.status import crawl_status
from scrapy_redis.queues.leases import Recovery
from scrapy_redis.spiders import RedisSpider

pytestmark = pytest.mark.timeout(120)

START_KEY = "myspider:start_urls"  # myspider_redis's, in example-project
#: The token of the dashboards bound beyond loopback (at least MIN_TOKEN_LENGTH long).
TOKEN = "correct-horse-battery-staple"
SAMPLE = re.compile(r'^[a-z_]+\{(?:[a-z]+="(?:[^"\\]|\\.)*",?)+\} -?[0-9.e+-]+$')


# -- actions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "read"),
    [
        ("list", lambda server: server.lrange("s:start_urls", 0, -1)),
        ("set", lambda server: sorted(server.smembers("s:start_urls"))),
        ("zset", lambda server: sorted(server.zrange("s:start_urls", 0, -1))),
    ],
)
def test_push_start_messages_in_the_keys_type(server, mode, read):
    messages = ["http://a.test/", ' {"url": "http://b.test/", "priority": 3} ', ""]
    assert push_start_messages(server, "s:start_urls", messages, mode) == 2
    assert read(server) == [b"http://a.test/", b'{"url": "http://b.test/", "priority": 3}']


@pytest.mark.parametrize("message", ['{"method": "GET"}', "[1, 2]", '{"url": 1}', '{"url'])
def test_push_refuses_a_message_without_a_url_and_pushes_nothing(server, message):
    with pytest.raises(InvalidStartMessageError):
        push_start_messages(server, "s:start_urls", ["http://a.test/", message])
    assert not server.exists("s:start_urls")


def test_push_refuses_nothing_to_push(server):
    with pytest.raises(InvalidStartMessageError, match="no message"):
        push_start_messages(server, "s:start_urls", [" ", ""])


def test_requeue_puts_back_what_a_dead_worker_held_once_its_lease_expired(
    settings_dict, server, schedulers
):
    dead = dying_worker(schedulers, settings_dict)
    assert requeue_expired(server, ["demo:requests"], 3) == Recovery(0, 0)  # not expired yet
    assert expire_leases(server) == 1
    assert requeue_expired(server, ["demo:requests"], 3) == Recovery(3, 0)
    assert leased_entries(server) == 0
    assert len(dead.queue) == 3


def test_purge_deletes_queued_and_leased_requests_and_keeps_the_filter(
    settings_dict, server, schedulers
):
    scheduler = schedulers(settings_dict)
    for n, priority in enumerate([0, 0, 5]):
        scheduler.enqueue_request(Request(f"http://example.com/{n}", priority=priority))
    assert scheduler.next_request() is not None  # one leased, with what it prefetched
    status = crawl_status(server, Settings(settings_dict), DemoSpider)
    assert status.queued + status.leased == 3
    purge_queue(server, status.queue_key)
    after = crawl_status(server, Settings(settings_dict), DemoSpider)
    assert (after.queued, after.leased) == (0, 0)
    assert server.keys("demo:requests*") == [b"demo:requests:workers"]  # the registry stays
    assert server.scard("demo:dupefilter") == 3


# -- /metrics ------------------------------------------------------------------------------


def test_metrics_are_the_status_numbers_in_prometheus_text_format(
    settings_dict, server, schedulers
):
    scheduler = schedulers(settings_dict)
    for n in range(4):
        scheduler.enqueue_request(Request(f"http://example.com/{n}"))
    assert scheduler.send_enqueued()
    server.hset("demo:stats", mapping={"response_received_count": 7, "item_scraped_count": 2})
    status = crawl_status(server, Settings(settings_dict), DemoSpider).to_json()
    text = metrics.render([status])
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert all(SAMPLE.match(line) for line in samples), samples
    assert status["queued"] == 4
    assert 'scrapy_redis_queued{spider="demo"} 4' in samples
    assert 'scrapy_redis_pages_total{spider="demo"} 7' in samples
    assert 'scrapy_redis_items_total{spider="demo"} 2' in samples
    assert "# TYPE scrapy_redis_pages_total counter" in text
    alive = sum(1 for worker in status["workers"] if worker["alive"])
    assert alive >= 1
    assert f'scrapy_redis_workers_alive{{spider="demo"}} {alive}' in samples
    assert status["items"] == 0  # no RedisPipeline list (yet): 0 items, as status shows
    assert 'scrapy_redis_items{spider="demo"} 0' in samples
    server.rpush("demo:items", "{}", "{}", "{}")
    with_items = crawl_status(server, Settings(settings_dict), DemoSpider).to_json()
    assert 'scrapy_redis_items{spider="demo"} 3' in metrics.render([with_items]).splitlines()


def test_metrics_escape_label_values():
    assert metrics.escape('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


# -- security, over HTTP -------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_dashboard(redis_server):
    dashboard = DashboardProcess(redis_server.url, "--interval", "1").start()
    yield dashboard
    dashboard.stop()


@pytest.fixture(scope="module")
def token_dashboard(redis_server):
    dashboard = DashboardProcess(
        redis_server.url, "--host", "0.0.0.0", "--token", TOKEN, entry=MODULE
    )
    yield dashboard.start()
    dashboard.stop()


def test_the_page_and_status_are_served_on_loopback_without_a_token(local_dashboard, server):
    page = http(local_dashboard.url)
    assert page.status == 200
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    assert http(local_dashboard.url + "static/dashboard.js").status == 200
    status = http(local_dashboard.url + "api/status").json()
    spiders = [crawl["spider"] for crawl in status["crawls"]]
    assert spiders == ["dmoz", "mycrawler_redis", "myspider_redis"]
    assert http(local_dashboard.url + "metrics").headers["Content-Type"].startswith("text/plain")


def test_another_host_name_is_refused_on_loopback(local_dashboard, server):
    """A page of another site that rebinds its name to 127.0.0.1 sends its own Host."""
    for path in ("", "api/status", "metrics"):
        reply = http(local_dashboard.url + path, headers={"Host": "evil.test:80"})
        assert reply.status == 403, path


def test_an_action_needs_the_pages_csrf_token_and_its_own_origin(local_dashboard, server):
    url = local_dashboard.url + "api/actions/push"
    token = csrf_token(http(local_dashboard.url).text)
    origin = local_dashboard.url.rstrip("/")
    body = {"spider": "myspider_redis", "messages": ["http://a.test/"]}
    assert http(url, "POST", body).status == 403
    assert http(url, "POST", body, {"X-CSRF-Token": "0" * 64}).status == 403
    evil = {"X-CSRF-Token": token, "Origin": "http://evil.test"}
    assert http(url, "POST", body, evil).status == 403
    assert not server.exists(START_KEY)
    reply = http(url, "POST", body, {"X-CSRF-Token": token, "Origin": origin})
    assert reply.status == 200, reply.text
    assert reply.json() == {"spider": "myspider_redis", "key": START_KEY, "pushed": 1}
    assert server.lrange(START_KEY, 0, -1) == [b"http://a.test/"]


def test_actions_are_post_only(local_dashboard, server):
    assert http(local_dashboard.url + "api/actions/push").status == 405


def test_purge_needs_the_spiders_name_as_confirmation(local_dashboard, server):
    server.hset("myspider_redis:stats", "x", 1)
    server.zadd("myspider_redis:requests", {"x": 0})
    headers = {"X-CSRF-Token": csrf_token(http(local_dashboard.url).text)}
    url = local_dashboard.url + "api/actions/purge"
    refused = http(url, "POST", {"spider": "myspider_redis"}, headers)
    assert refused.status == 400
    assert "confirm" in refused.json()["error"]
    assert server.exists("myspider_redis:requests")
    done = http(url, "POST", {"spider": "myspider_redis", "confirm": "myspider_redis"}, headers)
    assert done.status == 200, done.text
    assert not server.exists("myspider_redis:requests")
    assert server.exists("myspider_redis:stats")


def test_purge_over_http_is_refused_while_workers_are_alive_unless_forced(
    local_dashboard, server, settings_dict, schedulers
):
    """A worker of myspider_redis's queue is alive (registered, heartbeat renewed)."""
    worker = schedulers({**settings_dict, "SCHEDULER_QUEUE_KEY": "myspider_redis:requests"})
    for n in range(3):
        worker.enqueue_request(Request(f"http://example.com/{n}"))
    assert worker.send_enqueued()
    headers = {"X-CSRF-Token": csrf_token(http(local_dashboard.url).text)}
    url = local_dashboard.url + "api/actions/purge"
    body = {"spider": "myspider_redis", "confirm": "myspider_redis"}
    refused = http(url, "POST", body, headers)
    assert refused.status == 400, refused.text
    error = refused.json()["error"]
    assert f"1 workers of myspider_redis are alive ({worker.worker_id})" in error
    assert '"force": true' in error
    assert server.exists("myspider_redis:requests")
    assert http(url, "POST", {**body, "force": "yes"}, headers).status == 400  # true only
    forced = http(url, "POST", {**body, "force": True}, headers)
    assert forced.status == 200, forced.text
    assert forced.json() == {"spider": "myspider_redis", "purged": 3}
    assert server.keys("myspider_redis:requests*") == [b"myspider_redis:requests:workers"]


def test_requeue_over_http_puts_back_what_a_dead_worker_held(
    local_dashboard, server, settings_dict, schedulers
):
    """A worker of myspider_redis's queue leases three requests, then dies."""
    queue = {"SCHEDULER_QUEUE_KEY": "myspider_redis:requests"}
    dead = schedulers({**settings_dict, **queue})
    for n in range(3):
        dead.enqueue_request(Request(f"http://example.com/{n}"))
    assert dead.next_request() is not None
    assert expire_leases(server) == 1  # its lease expired
    headers = {"X-CSRF-Token": csrf_token(http(local_dashboard.url).text)}
    url = local_dashboard.url + "api/actions/requeue"
    reply = http(url, "POST", {"spider": "myspider_redis"}, headers)
    assert reply.status == 200, reply.text
    assert reply.json() == {"spider": "myspider_redis", "requeued": 3, "dead_lettered": 0}
    crawl = next(
        crawl
        for crawl in http(local_dashboard.url + "api/status").json()["crawls"]
        if crawl["spider"] == "myspider_redis"
    )
    assert (crawl["queued"], crawl["leased"]) == (3, 0)


def test_bad_action_requests_say_what_is_wrong(local_dashboard, server):
    headers = {"X-CSRF-Token": csrf_token(http(local_dashboard.url).text)}
    url = local_dashboard.url + "api/actions/"
    cases = [
        ("push", {"spider": "nobody", "messages": ["http://a.test/"]}, "no spider 'nobody'"),
        ("push", {"spider": "myspider_redis", "messages": ["{}"]}, "invalid start message"),
        ("push", {"spider": "dmoz", "messages": ["http://a.test/"]}, "not a RedisSpider"),
        ("launch", {"spider": "dmoz"}, "no action 'launch'"),
    ]
    for action, body, error in cases:
        reply = http(url + action, "POST", body, headers)
        assert reply.status == 400, reply.text
        assert error in reply.json()["error"]
    assert http(url + "push", "POST", b"[]", headers).status == 400


def without_token() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name != TOKEN_ENV}


def test_the_port_and_address_come_from_the_projects_settings(redis_url):
    port = free_port()
    dashboard = DashboardProcess(redis_url, "-s", f"DASHBOARD_PORT={port}").start()
    try:
        assert dashboard.url == f"http://127.0.0.1:{port}/"
        assert http(f"{dashboard.url}api/status").status == 200
    finally:
        dashboard.stop()


def test_listening_beyond_loopback_needs_a_token(redis_url):
    result = subprocess.run(
        [sys.executable, "-m", "scrapy_redis.dashboard", "--host", "0.0.0.0", "--port", "0"],
        cwd=EXAMPLE, capture_output=True, text=True, timeout=60,
        env={**without_token(), "REDIS_URL": redis_url},
    )  # fmt: skip
    assert result.returncode == 2
    assert "--token" in result.stderr
    assert "SCRAPY_REDIS_DASHBOARD_TOKEN" in result.stderr


def test_with_a_token_every_request_needs_it(token_dashboard, server):
    url = token_dashboard.url
    assert http(url + "api/status").status == 401
    assert http(url + "metrics").status == 401
    assert http(url + "static/dashboard.css").status == 200  # for the login form
    to_login = http(url)
    assert (to_login.status, to_login.headers["Location"]) == (302, "/login")
    assert http(url + "api/status", headers={"Authorization": "Bearer wrong"}).status == 401
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert http(url + "api/status", headers=bearer).status == 200
    assert http(url + "metrics", headers=bearer).text.startswith("# HELP")


def test_the_login_form_sets_a_session_cookie_and_actions_still_need_csrf(token_dashboard, server):
    url = token_dashboard.url
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    assert http(url + "login", "POST", b"token=wrong", form).status == 401
    login = http(url + "login", "POST", f"token={TOKEN}".encode(), form)
    assert login.status == 302
    session = login.cookies[cookie_name(url)]
    assert TOKEN not in session
    assert "HttpOnly" in login.headers["Set-Cookie"]
    assert "SameSite=Strict" in login.headers["Set-Cookie"]
    cookie = {"Cookie": f"{cookie_name(url)}={session}"}
    page = http(url, headers=cookie)
    assert page.status == 200
    body = {"spider": "myspider_redis", "messages": ["http://b.test/"]}
    push = url + "api/actions/push"
    assert http(push, "POST", body, cookie).status == 403
    anonymous_token = csrf_token(http(url, headers={"Authorization": f"Bearer {TOKEN}"}).text)
    assert http(push, "POST", body, {**cookie, "X-CSRF-Token": anonymous_token}).status == 403
    reply = http(push, "POST", body, {**cookie, "X-CSRF-Token": csrf_token(page.text)})
    assert reply.status == 200, reply.text
    assert server.lrange(START_KEY, 0, -1) == [b"http://b.test/"]


def test_with_a_token_scripts_act_with_the_bearer_token_alone(token_dashboard, server):
    body = {"spider": "myspider_redis", "messages": ["http://c.test/"]}
    push = token_dashboard.url + "api/actions/push"
    assert http(push, "POST", body, {"Authorization": "Bearer nope"}).status == 401
    reply = http(push, "POST", body, {"Authorization": f"Bearer {TOKEN}"})
    assert reply.status == 200, reply.text
    assert server.lrange(START_KEY, 0, -1) == [b"http://c.test/"]


def test_a_spider_is_read_and_changed_in_the_redis_its_own_settings_name(redis_url, server):
    """A spider whose custom_settings name another Redis (here database 1): the page's
    numbers and its push are that Redis's."""
    other_db = redis_url.rsplit("/", 1)[0] + "/1"

    class Elsewhere(RedisSpider):
        name = "elsewhere"
        custom_settings = {"REDIS_URL": other_db}

    fleet = Fleet(server, Settings({"REDIS_URL": redis_url}), spiders=[Elsewhere])
    other = redis.Redis.from_url(other_db)
    try:
        fleet.push("elsewhere", {"messages": ["http://a.test/1", "http://a.test/2"]})
        assert other.llen("elsewhere:start_urls") == 2 and server.keys() == []
        assert fleet.status("elsewhere").start_pending == 2
    finally:
        other.flushdb()
        other.close()
