"""``scrapy redis <verb>``, run as users run it: a ``scrapy`` process inside a Scrapy project.

The project (written to a temporary directory by the ``project`` fixture) has one
RedisSpider, ``demo``; the crawl data the verbs read is made by this package's own
scheduler (tests/helpers.py, the spider ``demo`` too), on the session's redis-server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from scrapy import Request

from helpers import expire_leases
from scrapy_redis.serializers import msgpack_serializer
from test_cluster import all_keys, masters_holding

SPIDER = """
from scrapy_redis.spiders import RedisSpider


class DemoSpider(RedisSpider):
    name = "demo"

    def parse(self, response):
        return None

    def parse_item(self, response):
        return None
"""

SCHEDULER = "scrapy_redis.scheduler.Scheduler"
LEAN = "scrapy_redis.dupefilter.LeanDupeFilter"

SETTINGS = """
import os

BOT_NAME = "proj"
SPIDER_MODULES = ["proj.spiders"]
SCHEDULER = "scrapy_redis.scheduler.Scheduler"
DUPEFILTER_CLASS = "scrapy_redis.dupefilter.RFPDupeFilter"
REDIS_URL = os.environ["REDIS_URL"]
"""


@dataclass
class Project:
    path: Path
    redis_url: str

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """``scrapy redis ARGS`` in the project."""
        return self.scrapy("redis", *args, stdin=stdin)

    def scrapy(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """``scrapy ARGS`` in the project."""
        env = {**os.environ, "REDIS_URL": self.redis_url}
        env.pop("SCRAPY_SETTINGS_MODULE", None)
        return subprocess.run(
            [sys.executable, "-m", "scrapy", *args],
            cwd=self.path,
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def json(self, *args: str, stdin: str | None = None) -> dict:
        result = self.run(*args, "--json", stdin=stdin)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


def write_project(path: Path, redis_url: str) -> Project:
    """A Scrapy project in ``path`` (scrapy.cfg, settings, the spider ``demo``)."""
    (path / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    package = path / "proj"
    (package / "spiders").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text(textwrap.dedent(SETTINGS))
    (package / "spiders" / "__init__.py").write_text(textwrap.dedent(SPIDER))
    return Project(path, redis_url)


@pytest.fixture
def project(tmp_path, redis_url, server) -> Project:
    return write_project(tmp_path, redis_url)


def test_scrapy_lists_the_command_and_the_verbs(project, tmp_path_factory):
    assert "  redis " in project.scrapy("-h").stdout
    verbs = project.run("-h").stdout
    for verb in ("export", "purge", "push", "requeue", "status", "watch"):
        assert f"    {verb} " in verbs
    outside = tmp_path_factory.mktemp("outside")  # no scrapy.cfg here nor above
    elsewhere = Project(outside, project.redis_url).run("status")
    assert elsewhere.returncode == 2
    assert "scrapy redis runs inside a Scrapy project" in elsewhere.stderr


# -- push -------------------------------------------------------------------------------


def test_push_refuses_every_message_if_one_is_invalid(project, server):
    result = project.run("push", "demo", "http://a.test/", '{"url": "http://b.test/", "x": 1}')
    assert result.returncode == 1
    assert "unknown key 'x'" in result.stderr
    assert server.llen("demo:start_urls") == 0


def test_push_skip_invalid_pushes_the_valid_ones_in_order(project, server):
    lines = '{"url": "http://b.test/", "callback": "parse_item"}\n\nnot a url\nhttp://c.test/\n'
    result = project.run("push", "demo", "-", "--skip-invalid", "--json", stdin=lines)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["pushed"] == 2
    assert [entry["message"] for entry in report["refused"]] == ["not a url"]
    assert "Missing scheme" in report["refused"][0]["reason"]
    stored = server.lrange("demo:start_urls", 0, -1)
    assert stored == [b'{"url": "http://b.test/", "callback": "parse_item"}', b"http://c.test/"]
    bad_callback = project.run("push", "demo", '{"url": "http://d.test/", "callback": "nope"}')
    assert "spider has no method 'nope'" in bad_callback.stderr


def test_push_to_a_sorted_set_and_to_a_set(project, server):
    zset = project.json(
        "push", "demo", "http://a.test/", "--score", "5", "-s", "REDIS_START_URLS_AS_ZSET=True"
    )
    assert zset == {"key": "demo:start_urls", "pushed": 1, "refused": []}
    assert server.zscore("demo:start_urls", "http://a.test/") == 5
    pushed = project.json(
        "push",
        "demo",
        "http://a.test/",
        "http://a.test/",
        "-a",
        "redis_key=other:%(name)s",
        "-s",
        "REDIS_START_URLS_AS_SET=True",
    )
    assert pushed == {"key": "other:demo", "pushed": 1, "refused": []}
    assert server.smembers("other:demo") == {b"http://a.test/"}


# -- export -----------------------------------------------------------------------------


def schedule(schedulers, settings: dict, requests: list[Request]):
    """A worker's scheduler (registered, its timers stopped) that pushed ``requests``."""
    scheduler = schedulers(settings)
    scheduler.stop_timers()
    for request in requests:
        scheduler.enqueue_request(request)
    assert scheduler.send_enqueued()
    return scheduler


def leave(scheduler) -> None:
    """The worker leaves the registry, keeping the data (as with SCHEDULER_PERSIST)."""
    scheduler.persist = True
    scheduler.close("finished")


@pytest.mark.parametrize("shards", ["1", "2"])
def test_export_queue_in_pop_order_with_lanes(project, schedulers, settings_dict, shards):
    settings = {**settings_dict, "SCHEDULER_SHARDS": shards}
    requests = [
        Request(f"http://a.test/{n}", priority=n % 3, meta={"n": n}, headers={"Referer": "r"})
        for n in range(30)
    ]
    leave(schedule(schedulers, settings, requests))
    result = project.run("export", "demo", "queue")  # the lanes the crawl recorded
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert "Exported 30 queued requests of demo" in result.stderr
    assert sorted(line["url"] for line in lines) == sorted(r.url for r in requests)
    assert all(line["meta"] == {"n": int(line["url"].rsplit("/", 1)[1])} for line in lines)
    assert list(lines[0])[:4] == ["url", "method", "priority", "meta"]
    assert lines[0]["headers"] == {"Referer": ["r"]}  # bytes in Redis, text in JSON
    if shards == "1":  # one queue: highest priority first, first in first out
        expected = sorted(requests, key=lambda r: -r.priority)
        assert [line["url"] for line in lines] == [r.url for r in expected]


def test_export_fingerprints_items_and_refusals(
    project, schedulers, settings_dict, server, tmp_path
):
    scheduler = schedule(
        schedulers, settings_dict, [Request(f"http://a.test/{n}") for n in range(5)]
    )
    leave(scheduler)
    output = tmp_path / "fingerprints.jsonl"
    result = project.run("export", "demo", "fingerprints", "-o", str(output))
    assert result.returncode == 0, result.stderr
    exported = {json.loads(line)["fingerprint"] for line in output.read_text().splitlines()}
    assert exported == {member.decode() for member in server.smembers("demo:dupefilter")}
    assert len(exported) == 5
    items = [json.dumps({"n": n, "text": "é"}, ensure_ascii=False) for n in range(3)]
    server.rpush("demo:items", *items)
    assert project.run("export", "demo", "items").stdout.splitlines() == items
    lean = project.run(
        "export",
        "demo",
        "fingerprints",
        "-s",
        "DUPEFILTER_CLASS=scrapy_redis.dupefilter.LeanDupeFilter",
    )
    assert lean.returncode == 2
    assert "LeanDupeFilter cannot list its fingerprints" in lean.stderr


def test_export_to_a_reader_that_stops_early(project, server):
    server.rpush("demo:items", *[json.dumps({"n": n, "text": "x" * 100}) for n in range(5000)])
    command = [sys.executable, "-m", "scrapy", "redis", "export", "demo", "items"]
    env = {**os.environ, "REDIS_URL": project.redis_url}
    with subprocess.Popen(
        command, cwd=project.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        assert json.loads(process.stdout.readline()) == {"n": 0, "text": "x" * 100}
        process.stdout.close()  # as `| head -1` does
        stderr = process.stderr.read().decode()
    assert process.returncode == 1
    assert "Traceback" not in stderr and "Error" not in stderr


# -- requeue ----------------------------------------------------------------------------


def test_requeue_invalid_puts_back_what_decodes_now(project, schedulers, settings_dict, server):
    leave(schedule(schedulers, settings_dict, []))
    entry = msgpack_serializer.dumps(
        {"url": "http://a.test/", "priority": 7, "callback": "parse_item", "meta": {}}
    )
    server.rpush("demo:requests:invalid", b"\x00garbage", entry)
    result = project.run("requeue", "demo", "--invalid")
    assert result.returncode == 1
    assert "Invalid entries put back in the queue: 1" in result.stdout
    assert "Still invalid, left in place: 1" in result.stderr
    assert server.lrange("demo:requests:invalid", 0, -1) == [b"\x00garbage"]
    assert server.lrange("demo:requests:prio:7", 0, -1) == [entry]
    assert server.zscore("demo:requests", "7") == -7


def test_requeue_invalid_from_a_long_list_keeps_what_stays_in_order(
    project, schedulers, settings_dict, server
):
    """Each batch is one script call checking positions, then one LREM (not one per entry)."""
    leave(schedule(schedulers, settings_dict, []))
    entries = [
        msgpack_serializer.dumps({"url": f"http://a.test/{n}", "priority": n % 2, "meta": {}})
        for n in range(1500)
    ]
    garbage = [b"\x00garbage %d" % n for n in range(3000)]
    mixed = [
        item for pair in zip(garbage[::2], garbage[1::2], entries, strict=True) for item in pair
    ]
    mixed.append(entries[0])  # the same entry twice: both go back
    server.rpush("demo:requests:invalid", *mixed)
    result = project.run("requeue", "demo", "--invalid", "--json")
    assert result.returncode == 1, result.stderr  # some stay invalid
    report = json.loads(result.stdout)["invalid"]
    assert (report["requeued"], report["still_invalid"]) == (1501, 3000)
    assert server.lrange("demo:requests:invalid", 0, -1) == garbage
    back = server.lrange("demo:requests:prio:0", 0, -1) + server.lrange(
        "demo:requests:prio:1", 0, -1
    )
    assert sorted(back) == sorted([*entries, entries[0]])


def test_requeue_expired_recovers_a_dead_workers_leases(project, schedulers, settings_dict, server):
    requests = [Request(f"http://a.test/{n}") for n in range(4)]
    scheduler = schedule(schedulers, settings_dict, requests)
    assert scheduler.next_request() is not None  # the worker leases the batch, then dies
    assert server.llen("demo:requests:prio:0") == 0
    assert expire_leases(server) == 1
    report = project.json("requeue", "demo", "--expired")
    assert report["expired"] == {"requeued": 4, "dead_lettered": 0}
    assert "invalid" not in report
    assert server.llen("demo:requests:prio:0") == 4
    assert server.hlen("demo:requests:leases") == 0


# -- purge ------------------------------------------------------------------------------


def test_purge_refuses_while_workers_are_alive_then_deletes(
    project, schedulers, settings_dict, server
):
    scheduler = schedule(
        schedulers, settings_dict, [Request(f"http://a.test/{n}") for n in range(3)]
    )
    server.rpush("demo:items", "{}")
    refused = project.run("purge", "demo", "--queue", "--yes")
    assert refused.returncode == 1
    assert "workers of demo are alive" in refused.stderr
    assert server.exists("demo:requests")
    unasked = project.run("purge", "demo", "--queue", "--force")  # stdin is no terminal
    assert unasked.returncode == 2
    assert "add --yes" in unasked.stderr
    forced = project.json("purge", "demo", "--queue", "--force", "--yes")
    assert forced["purged"] == ["queue"]
    assert not server.exists("demo:requests", "demo:requests:prio:0")
    assert server.exists("demo:dupefilter", "demo:items") == 2
    leave(scheduler)
    result = project.run("purge", "demo", "--all", "--yes")
    assert result.returncode == 0, result.stderr
    assert server.keys() == []


def test_purge_queue_keeps_the_lane_count_while_the_fingerprints_stay(
    project, schedulers, settings_dict, server
):
    settings = {**settings_dict, "SCHEDULER_SHARDS": 2}
    leave(schedule(schedulers, settings, [Request(f"http://a.test/{n}") for n in range(6)]))
    assert server.get("demo:requests:lanes") == b"2"
    assert project.run("purge", "demo", "--queue", "--yes").returncode == 0
    assert server.get("demo:requests:lanes") == b"2"  # the filters are still in 2 lanes
    (status,) = project.json("status", "demo")["spiders"]
    assert (status["lanes"], status["queued"], status["fingerprints"]) == (2, 0, 6)
    both = project.run("purge", "demo", "--queue", "--fingerprints", "--yes")
    assert both.returncode == 0, both.stderr
    assert not server.exists("demo:requests:lanes")
    assert server.keys("*dupefilter*") == []


def test_purge_queue_deletes_priority_lists_no_index_names(
    project, schedulers, settings_dict, server
):
    """A list left by a purge racing a push: a later push of its priority would revive it."""
    leave(schedule(schedulers, settings_dict, [Request("http://a.test/", priority=1)]))
    server.rpush("demo:requests:prio:9", b"stale")
    result = project.json("purge", "demo", "--queue", "--yes")
    assert result["keys_deleted"] == 3  # the index, the list of priority 1, the stale list
    assert server.keys("demo:requests*") == []
    assert server.exists("demo:dupefilter")


def test_purge_checks_for_live_workers_again_once_answered(
    project, schedulers, settings_dict, server
):
    """A worker started while the question waits for an answer: its crawl is kept."""
    import pty
    import select

    leave(schedule(schedulers, settings_dict, [Request("http://a.test/")]))
    controller, terminal = pty.openpty()
    env = {**os.environ, "REDIS_URL": project.redis_url}
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    command = [sys.executable, "-m", "scrapy", "redis", "purge", "demo", "--queue"]
    with subprocess.Popen(
        command, cwd=project.path, env=env, stdin=terminal, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            asked = ""
            while "[y/N]" not in asked:
                assert select.select([process.stderr], [], [], 30)[0], asked
                asked += os.read(process.stderr.fileno(), 4096).decode()
            worker = schedule(schedulers, settings_dict, [])  # joins the crawl meanwhile
            os.write(controller, b"y\n")
            assert process.wait(timeout=30) == 1
            told = process.stderr.read()
        finally:
            os.close(controller)
            os.close(terminal)
            if process.poll() is None:
                process.kill()
    assert f"Refused: 1 workers of demo are alive ({worker.worker_id})" in told
    assert server.llen("demo:requests:prio:0") == 1


# -- status -----------------------------------------------------------------------------


def test_status_of_every_spider_and_of_an_unknown_one(project, schedulers, settings_dict):
    settings = {**settings_dict, "SCHEDULER_SHARDS": 2}
    scheduler = schedule(schedulers, settings, [Request(f"http://a.test/{n}") for n in range(3)])
    text = project.run("status").stdout
    assert "demo (PriorityQueue demo:requests, 2 lanes)" in text
    assert "  queue        3 queued, 0 leased" in text
    assert f"    {scheduler.worker_id}  alive  heartbeat " in text
    unknown = project.run("status", "nope")
    assert unknown.returncode == 2
    assert "No spider named 'nope' in this project; spiders: demo" in unknown.stderr


def test_status_reads_a_spider_from_the_redis_its_own_settings_name(project, redis_url):
    """A spider whose custom_settings name another Redis (here database 1) is read there."""
    other_db = redis_url.rsplit("/", 1)[0] + "/1"
    (project.path / "proj" / "spiders" / "elsewhere.py").write_text(
        "from scrapy_redis.spiders import RedisSpider\n\n\n"
        "class Elsewhere(RedisSpider):\n"
        "    name = 'elsewhere'\n"
        f"    custom_settings = {{'REDIS_URL': {other_db!r}}}\n"
    )
    client = redis.Redis.from_url(other_db)
    try:
        client.rpush("elsewhere:start_urls", "http://a.test/1", "http://a.test/2")
        status = project.json("status", "elsewhere")
    finally:
        client.flushdb()
        client.close()
    (shown,) = status["spiders"]
    assert shown["start_pending"] == 2
    assert "no worker is alive" in shown["diagnosis"]


# -- on a Redis Cluster -----------------------------------------------------------------


def test_export_status_and_purge_of_a_crawl_in_lanes_on_a_cluster(
    tmp_path, redis_cluster, cluster, schedulers
):
    settings = {"REDIS_URL": redis_cluster.url, "SCHEDULER": SCHEDULER, "DUPEFILTER_CLASS": LEAN}
    leave(schedule(schedulers, settings, [Request(f"http://a.test/{n}") for n in range(30)]))
    project = write_project(tmp_path, redis_cluster.url)
    lines = project.run("export", "demo", "queue").stdout.splitlines()
    urls = sorted(json.loads(line)["url"] for line in lines)
    assert urls == sorted(f"http://a.test/{n}" for n in range(30))
    (status,) = project.json("status", "demo")["spiders"]
    assert (status["lanes"], status["queued"], status["fingerprints"]) == (3, 30, 30)
    buckets = [key for key in all_keys(cluster) if ":lean:" in key]
    assert len(masters_holding(cluster, buckets)) == 3  # a SCAN on one master misses some
    purged = project.run("purge", "demo", "--all", "--yes", "-s", f"DUPEFILTER_CLASS={LEAN}")
    assert purged.returncode == 0, purged.stderr
    assert all_keys(cluster) == set()


def test_the_progress_bar_draws_on_a_terminal_only():
    import io

    from scrapy_redis.commands.progress import Progress

    drawn = io.StringIO()
    bar = Progress(drawn, "purge demo", total=10, enabled=True)
    bar.advance(5)
    assert bar.line() == f"purge demo [{'#' * 15}{'-' * 15}] 5/10  50%"
    bar.advance(5)
    bar.finish()
    assert drawn.getvalue().startswith("\rpurge demo [")
    assert drawn.getvalue().endswith(f"[{'#' * 30}] 10/10 100%\n")
    assert Progress(drawn, "export", None, enabled=True).line() == "export: 0"
    quiet = io.StringIO()  # not a terminal: nothing drawn
    Progress(quiet, "purge demo", total=10).advance(10)
    assert quiet.getvalue() == ""
