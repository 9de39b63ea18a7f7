"""The fleet tools against what anyone who can write to Redis may leave there, and against
being stopped half-way: ``scrapy redis`` run as users run it (a ``scrapy`` process in a
project, see tests/test_commands.py), the dashboard's HTTP endpoints (a real dashboard,
see tests/dashboard_process.py), on a real redis-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
from scrapy import Request
from scrapy.settings import Settings

from dashboard_process import DashboardProcess, http
from helpers import open_scheduler
from scrapy_redis.commands.verbs.status import render
from scrapy_redis.fleet.status import crawl_status
from scrapy_redis.store.scripts import script
from test_commands import LEAN, leave, schedule, write_project
from test_status import StartSpider

pytestmark = pytest.mark.timeout(180)


# -- purge, stopped half-way ---------------------------------------------------------------


DYING_CLIENT = """
import os
import signal

import redis


class DyingRedis(redis.Redis):
    \"\"\"A client whose process is killed (SIGKILL, as kill -9) when it is about to send
    its UNLINK number DIE_AT_UNLINK: stopped right after the ones before.\"\"\"

    unlinks = 0

    def execute_command(self, *args, **options):
        if str(args[0]).upper() == "UNLINK":
            DyingRedis.unlinks += 1
            if DyingRedis.unlinks == int(os.environ["DIE_AT_UNLINK"]):
                os.kill(os.getpid(), signal.SIGKILL)
        return super().execute_command(*args, **options)
"""

DYING_SETTINGS = """
if os.environ.get("DIE_AT_UNLINK"):
    REDIS_PARAMS = {"redis_cls": "proj.dying.DyingRedis"}
"""


@pytest.mark.parametrize("die_at", [2, 4])
def test_a_purge_killed_after_an_unlink_batch_deletes_everything_when_run_again(
    tmp_path, redis_url, server, schedulers, settings_dict, die_at
):
    settings = {**settings_dict, "DUPEFILTER_CLASS": LEAN, "SCHEDULER_SHARDS": "2"}
    requests = [Request(f"http://a.test/{n}") for n in range(3000)]
    leave(schedule(schedulers, settings, requests))
    assert len(server.keys("*:lean:*")) > 2000  # several UNLINK batches of 500
    project = write_project(tmp_path, redis_url)
    (project.path / "proj" / "dying.py").write_text(DYING_CLIENT)
    with open(project.path / "proj" / "settings.py", "a") as settings_file:
        settings_file.write(DYING_SETTINGS)
    purge = ["redis", "purge", "demo", "--all", "--yes", "-s", f"DUPEFILTER_CLASS={LEAN}"]
    os.environ["DIE_AT_UNLINK"] = str(die_at)
    try:
        killed = project.scrapy(*purge)
    finally:
        del os.environ["DIE_AT_UNLINK"]
    assert killed.returncode == -9, killed.stderr
    assert server.keys("*:lean:*")  # stopped half-way

    again = project.scrapy(*purge)

    assert again.returncode == 0, again.stderr
    assert server.keys() == []


# -- one bad value in one crawl ---------------------------------------------------------------

OTHER_SPIDER = """

class OtherSpider(RedisSpider):
    name = "other"
"""


def _far() -> int:
    return int(time.time() * 1000) + 600_000


#: What anyone who can write to Redis may leave in the keys the tools read (a crawl's
#: keys under ``{q}``, its queue key, ``{s}`` its stats key and ``{u}`` its first start
#: key): (the plant, the key named as unreadable).
BAD_VALUES = {
    "stat abc": (lambda r, q, s, u: r.hset(s, "response_received_count", "abc"), "{s}"),
    "stat bad date": (lambda r, q, s, u: r.hset(s, "start_time", "2026-13-45T99:99:99"), "{s}"),
    "stat 5,000 digits": (lambda r, q, s, u: r.hset(s, "item_scraped_count", "7" * 5000), "{s}"),
    "invalid count abc": (
        lambda r, q, s, u: r.hset(s, "redis/start_messages/invalid", "abc"),
        "{s}",
    ),
    "worker id not UTF-8": (lambda r, q, s, u: r.hset(f"{q}:workers", b"\xff\xfe:1:x", _far()), ""),
    "worker id escapes": (
        lambda r, q, s, u: r.hset(f"{q}:workers", "\x1b[2J\x1b]0;owned\x07:1:x", _far()),
        "",
    ),
    "worker deadline abc": (
        lambda r, q, s, u: r.hset(f"{q}:workers", "host:1:x", "abc"),
        "{q}:workers",
    ),
    "lean count lots": (
        lambda r, q, s, u: r.hset(q.replace("requests", "dupefilter:lean"), "count", "lots"),
        "{f}:lean",
    ),
    "lanes 3x": (lambda r, q, s, u: r.set(f"{q}:lanes", "3x"), "{q}:lanes"),
    "lanes 16384": (lambda r, q, s, u: r.set(f"{q}:lanes", "16384"), "{q}:lanes"),
    "lanes 0": (lambda r, q, s, u: r.set(f"{q}:lanes", "0"), "{q}:lanes"),
    "stats a string": (lambda r, q, s, u: r.set(s, "x"), "{s}"),
    "leases a string": (lambda r, q, s, u: r.set(f"{q}:leases", "x"), "{q}:leases"),
    "deadlines a hash": (
        lambda r, q, s, u: r.hset(f"{q}:lease_deadlines", "a", "1"),
        "{q}:lease_deadlines",
    ),
    "workers a string": (lambda r, q, s, u: r.set(f"{q}:workers", "x"), "{q}:workers"),
    "invalid a hash": (lambda r, q, s, u: r.hset(f"{q}:invalid", "a", "1"), "{q}:invalid"),
    "dead a set": (lambda r, q, s, u: r.sadd(f"{q}:dead", "x"), "{q}:dead"),
    "priority list a string": (
        lambda r, q, s, u: (r.zadd(q, {"0": 0}), r.set(f"{q}:prio:0", "x")),
        "{q}:prio:0",
    ),
    "priority 5,000 digits": (lambda r, q, s, u: r.zadd(q, {"9" * 5000: 0}), "{q}"),
    "start leases a string": (lambda r, q, s, u: r.set(f"{u}:leases", "x"), "{u}:leases"),
    "stats workers a string": (lambda r, q, s, u: r.set(f"{s}:workers", "x"), ""),
    "items a hash": (lambda r, q, s, u: r.hset(q.replace("requests", "items"), "a", "1"), "{i}"),
}


def plant(server, name: str, spider: str, start_key: str) -> str:
    """Plant the bad value ``name`` in the crawl of ``spider``: the key to be named."""
    fill, key = BAD_VALUES[name]
    q, s = f"{spider}:requests", f"{spider}:stats"
    fill(server, q, s, start_key)
    f, i = f"{spider}:dupefilter", f"{spider}:items"
    return key.format(q=q, s=s, u=start_key, f=f, i=i)


@pytest.fixture
def two_crawls(tmp_path, redis_url, server):
    """A project of two RedisSpiders, ``demo`` and ``other``, each with a start message."""
    project = write_project(tmp_path, redis_url)
    with open(project.path / "proj" / "spiders" / "__init__.py", "a") as spiders:
        spiders.write(OTHER_SPIDER)
    server.rpush("demo:start_urls", "http://a.test/")
    server.rpush("other:start_urls", "http://b.test/", "http://c.test/")
    return project


def one_line_or_none(result) -> None:
    """A command's failure is one line, never a traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) <= 1, result.stderr
    assert "\x1b" not in result.stdout + result.stderr


@pytest.mark.parametrize("bad", sorted(BAD_VALUES))
def test_one_bad_value_is_named_and_the_rest_of_the_crawl_read(server, settings_dict, bad):
    key = plant(server, bad, "demo", "demo:start_urls")
    server.rpush("demo:start_urls", "http://a.test/")

    status = crawl_status(server, Settings(settings_dict), StartSpider)

    assert status.start_pending == 1  # the rest is read
    if key:
        assert any(problem.startswith(f"{key} ") for problem in status.unreadable)
    assert all(line.isprintable() for line in render(status))
    json.dumps(status.to_json(), allow_nan=False)


#: Bad values planted together (each in its own key): each named, nothing else lost.
SCENES = {
    "fields and types": [
        name for name in BAD_VALUES if not name.startswith(("lanes", "stats a", "workers a"))
    ],
    "lanes 3x": ["lanes 3x"],
    "lanes 16384": ["lanes 16384"],
    "lanes 0, stats and registry of another type": [
        "lanes 0",
        "stats a string",
        "workers a string",
    ],
}


@pytest.mark.parametrize("scene", sorted(SCENES))
def test_bad_values_in_one_crawl_are_named_by_every_tool_and_every_crawl_shown(
    two_crawls, server, scene
):
    keys = [plant(server, bad, "demo", "demo:start_urls") for bad in SCENES[scene]]
    runs = {
        "status": ("status", "--json"),
        "text": ("status",),
        "watch": ("watch", "--count", "1"),
        "export": ("export", "demo", "queue"),
        "items": ("export", "demo", "items"),
        "requeue": ("requeue", "demo", "--json"),
        "push": ("push", "demo", "http://d.test/"),
        "purge": ("purge", "demo", "--queue", "--yes"),
    }
    with ThreadPoolExecutor(4) as pool:  # (each is a process: run them together)
        done = dict(
            zip(runs, pool.map(lambda args: two_crawls.run(*args), runs.values()), strict=True)
        )

    for result in done.values():
        one_line_or_none(result)
    assert done["status"].returncode == 0, done["status"].stderr
    crawls = {crawl["spider"]: crawl for crawl in json.loads(done["status"].stdout)["spiders"]}
    assert crawls["other"]["start_pending"] == 2 and crawls["other"]["unreadable"] == []
    assert crawls["demo"]["start_pending"] >= 1
    for key in filter(None, keys):  # the crawl's status names the key, and what it holds
        problems = crawls["demo"]["unreadable"]
        assert any(problem.startswith(f"{key} ") for problem in problems), key
        assert f"unreadable   {key} " in done["text"].stdout
    assert done["text"].returncode == done["watch"].returncode == 0
    assert "other (PriorityQueue other:requests) in redis://" in done["watch"].stdout


def test_the_dashboard_shows_every_crawl_and_names_what_it_cannot_read(redis_url, server):
    keys = [
        plant(server, bad, "myspider_redis", "myspider:start_urls")
        for bad in SCENES["fields and types"]
    ]
    lanes = plant(server, "lanes 16384", "mycrawler_redis", "mycrawler:start_urls")
    server.rpush("myspider:start_urls", "http://a.test/")
    dashboard = DashboardProcess(redis_url).start()
    try:
        status = http(dashboard.url + "api/status")
        metrics = http(dashboard.url + "metrics")
    finally:
        dashboard.stop()

    assert status.status == 200 and metrics.status == 200
    crawls = {crawl["spider"]: crawl for crawl in status.json()["crawls"]}
    assert sorted(crawls) == ["dmoz", "mycrawler_redis", "myspider_redis"]
    assert crawls["myspider_redis"]["start_pending"] == 1
    for key in filter(None, keys):
        assert any(p.startswith(f"{key} ") for p in crawls["myspider_redis"]["unreadable"]), key
    assert crawls["mycrawler_redis"]["unreadable"] == [f"{lanes} holds 16384, not in 1..1024"]
    assert crawls["mycrawler_redis"]["queued"] is None  # unknown, not 0
    assert 'scrapy_redis_start_pending{spider="myspider_redis"} 1' in metrics.text
    assert 'scrapy_redis_queued{spider="dmoz"} 0' in metrics.text
    assert 'scrapy_redis_queued{spider="mycrawler_redis"}' not in metrics.text


# -- invalid start messages, status's units ---------------------------------------------------


def test_invalid_start_messages_are_exported_and_put_back_once_valid(two_crawls, server):
    valid_now = '{"url": "http://a.test/", "callback": "parse_item"}'
    server.rpush("demo:start_urls:invalid", valid_now, "not a url")
    server.rpush("demo:items", '{"name": "\x1b]0;owned\x07"}')

    exported = two_crawls.run("export", "demo", "invalid")
    items = two_crawls.run("export", "demo", "items")
    before = two_crawls.json("status", "demo")["spiders"][0]
    requeued = two_crawls.run("requeue", "demo", "--invalid", "--json")
    after = two_crawls.json("status", "demo")["spiders"][0]

    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [line["message"] for line in lines] == [valid_now, "not a url"]
    assert {line["key"] for line in lines} == {"demo:start_urls:invalid"}
    assert "Missing scheme" in lines[1]["error"]
    assert "\x1b" not in items.stdout and json.loads(items.stdout)["name"] == "\x1b]0;owned\x07"
    assert before["start_set_aside"] == 2 and after["start_set_aside"] == 1
    assert requeued.returncode == 1  # one is still invalid
    report = json.loads(requeued.stdout)["invalid_start"]
    assert (report["requeued"], report["still_invalid"]) == (1, 1)
    assert server.lrange("demo:start_urls", 0, -1) == [b"http://a.test/", valid_now.encode()]
    assert server.lrange("demo:start_urls:invalid", 0, -1) == [b"not a url"]


def test_status_names_its_server_and_counts_in_requests(two_crawls, server, redis_url):
    text = two_crawls.run("status", "other").stdout
    (status,) = two_crawls.json("status", "other")["spiders"]
    host_port_db = redis_url.split("://", 1)[1].rstrip("/")
    assert f"in redis://{host_port_db}" in text.splitlines()[0]
    assert status["server"].startswith("redis://") and "@" not in status["server"]
    assert (status["fingerprints"], status["items"]) == (0, 0)  # an empty crawl: 0
    assert "unknown" not in text


# -- move_crawl, killed between pushing a batch and releasing it -----------------------------

DYING_AT_SCRIPT = """
import os
import signal

import redis


class DyingRedis(redis.Redis):
    \"\"\"A client whose process is killed (SIGKILL) when it is about to call the script
    whose SHA1 is DIE_AT_SHA.\"\"\"

    def execute_command(self, *args, **options):
        if args[:2] == ("EVALSHA", os.environ.get("DIE_AT_SHA")):
            os.kill(os.getpid(), signal.SIGKILL)
        return super().execute_command(*args, **options)
"""


def test_a_move_killed_before_releasing_a_batch_moves_it_once_when_run_again(
    tmp_path, redis_url, server
):
    source = open_scheduler({**settings_of(redis_url), "SCHEDULER_PERSIST": True})
    for n in range(1198):  # three batches of 500 at most
        source.enqueue_request(Request(f"http://a.test/{n}", priority=n % 2))
    twice = Request("http://a.test/twice", dont_filter=True)
    source.enqueue_request(twice)
    source.enqueue_request(twice)  # the same entry twice in one batch: both moved
    assert source.send_enqueued()
    source.close("finished")
    source.stop_timers()
    target_url = redis_url.rstrip("/").rsplit("/", 1)[0] + "/1"
    target = redis.Redis.from_url(target_url)
    target.flushdb()
    project = write_project(tmp_path, redis_url)
    (project.path / "proj" / "dying.py").write_text(DYING_AT_SCRIPT)
    with open(project.path / "proj" / "settings.py", "a") as settings_file:
        settings_file.write('\nREDIS_PARAMS = {"redis_cls": "proj.dying.DyingRedis"}\n')
    command = ["-m", "scrapy_redis.move_crawl", "demo", "--from", redis_url, "--to", target_url]
    command += ["-s", "SCHEDULER_WORKER_TIMEOUT=2"]
    try:
        killed = python_in(project, command, DIE_AT_SHA=script("lease_ack").sha)
        assert killed.returncode == -9, killed.stderr
        assert _target_requests(target) == 500  # pushed, not released on the source
        deadlines = "demo:requests:lease_deadlines"
        wait_for(lambda: server.zrangebyscore(deadlines, "-inf", _now_ms(server)), 30)

        again = python_in(project, [*command, "--force"])

        assert again.returncode == 0, again.stderr
        assert "Moved 700 requests" in again.stdout  # the batch pushed was not again
        assert _target_requests(target) == 1200
        assert server.zcard("demo:requests") == 0 and target.keys("*:moving") == []
    finally:
        target.flushdb()
        target.close()


def settings_of(url: str) -> dict:
    return {"REDIS_URL": url, "SCHEDULER": "scrapy_redis.scheduler.Scheduler"}


def python_in(project, args: list[str], **env: str):
    """``python ARGS`` in the project's directory (its settings)."""
    environment = {**os.environ, "REDIS_URL": project.redis_url, **env}
    environment.pop("SCRAPY_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, *args], cwd=project.path, env=environment,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _target_requests(target) -> int:
    return sum(target.llen(key) for key in target.keys("demo:requests:prio:*"))


def _now_ms(server) -> int:
    seconds, micros = server.time()
    return seconds * 1000 + micros // 1000


def wait_for(condition, timeout: float):
    """Poll ``condition`` until it is true (AssertionError after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
    return result
