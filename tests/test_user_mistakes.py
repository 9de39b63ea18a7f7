"""The mistakes users make, met as they meet them (``scrapy crawl`` and ``scrapy redis``
run in a project directory): each one is told in one line saying what to do, never a
traceback; with ``--json`` the ``scrapy redis`` verbs print a JSON error document."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from scrapy_redis.connection import check_url
from scrapy_redis.exceptions import ConfigurationError
from scrapy_redis.store.permissions import check_access
from test_commands import Project, write_project

pytestmark = pytest.mark.timeout(180)

TRACEBACK = re.compile(r"Traceback|^\s+File \"", re.MULTILINE)


def error_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "] ERROR:" in line or "] CRITICAL:" in line]


def crawl(project: Project) -> tuple[int, str]:
    result = project.scrapy(
        "crawl", "demo", "-s", "MAX_IDLE_TIME_BEFORE_CLOSE=1", "-s", "TELNETCONSOLE_ENABLED=0"
    )
    return result.returncode, result.stdout + result.stderr


def assert_one_line(returncode: int, log: str, *expected: str) -> None:
    assert returncode != 0, log
    assert not TRACEBACK.search(log), log
    (line,) = error_lines(log) or [log.strip()]
    for text in expected:
        assert text in line, line


def assert_verb_refuses(project: Project, verb: list[str], *expected: str) -> None:
    """``scrapy redis VERB``: one line on stderr, exit 1; with --json, a JSON document."""
    text = project.run(*verb)
    assert text.returncode == 1, text.stderr
    assert not TRACEBACK.search(text.stderr), text.stderr
    (line,) = text.stderr.splitlines()
    assert line.startswith("error: ")
    for expected_text in expected:
        assert expected_text in line, line
    as_json = project.run(*verb, "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout) == {"error": line.removeprefix("error: "), "exit_code": 1}


@pytest.fixture
def project_at(tmp_path, redis_url, server):
    """``project_at(url)``: the test project, its REDIS_URL ``url``."""
    path = write_project(tmp_path, redis_url).path
    return lambda url: Project(path, url)


@pytest.mark.parametrize(
    ("url", "meant"),
    [("127.0.0.1:{port}", "redis://127.0.0.1:{port}"),
     ("http://127.0.0.1:{port}/0", "redis://127.0.0.1:{port}/0")],
)  # fmt: skip
def test_a_malformed_redis_url_says_which_forms_it_may_take(project_at, redis_server, url, meant):
    project = project_at(url.format(port=redis_server.port))
    expected = (f"did you mean '{meant.format(port=redis_server.port)}'?", "redis+cluster://",
                "redis+sentinel://", "rediss://")  # fmt: skip
    assert_one_line(*crawl(project), *expected)
    assert_verb_refuses(project, ["status"], *expected)
    assert_verb_refuses(project, ["push", "demo", "https://a.test/"], *expected)


def test_a_database_out_of_range(project_at, redis_server):
    project = project_at(redis_server.url.rsplit("/", 1)[0] + "/99")
    expected = ("has no database 99", "'databases' setting")
    assert_one_line(*crawl(project), *expected)
    assert_verb_refuses(project, ["status"], *expected)
    assert_verb_refuses(project, ["push", "demo", "https://a.test/"], *expected)


@pytest.fixture
def acl_user(server, redis_server):
    """``acl_user(name, *rules)``: an ACL user (password ``pw``) and its REDIS_URL."""
    made = []

    def make(name: str, *rules: str) -> str:
        server.execute_command("ACL", "SETUSER", name, "on", ">pw", *rules)
        made.append(name)
        return redis_server.url.replace("redis://", f"redis://{name}:pw@")

    yield make
    for name in made:
        server.acl_deluser(name)


def test_a_worker_whose_user_may_not_run_scripts_stops_in_one_line(project_at, acl_user):
    project = project_at(acl_user("noscripts", "~*", "&*", "+@all", "-@scripting"))
    assert_one_line(*crawl(project), "ACL user 'noscripts' may not use scripts",
                    "ACL SETUSER noscripts +@scripting")  # fmt: skip
    pushed = project.run("push", "demo", "https://a.test/")  # a producer needs no script
    assert pushed.returncode == 0, pushed.stderr
    assert_verb_refuses(project, ["requeue", "demo", "--expired"],
                        "'evalsha' command", "ACL SETUSER noscripts +@scripting")  # fmt: skip


def test_a_user_without_the_crawls_keys_is_told_which_to_grant(project_at, acl_user):
    project = project_at(acl_user("startonly", "~demo:start_urls", "&*", "+@all"))
    assert_one_line(*crawl(project), "may not use the key 'demo:requests' (SCHEDULER_QUEUE_KEY)",
                    "ACL SETUSER startonly '~demo:*'")  # fmt: skip
    expected = ("ACL user 'startonly'", "ACL SETUSER startonly '~")
    assert_verb_refuses(project, ["status"], *expected)
    assert_verb_refuses(project, ["push", "demo", "https://a.test/"],
                        "may not use the key 'demo:requests'", *expected)  # fmt: skip


def test_the_access_check_lets_a_cluster_and_a_full_user_through(cluster, server):
    crawling = SimpleNamespace(crawling=True)
    for client in (cluster, server):
        check_access(client, [("{demo}:requests", "SCHEDULER_QUEUE_KEY")], "scheduler", crawling)


@pytest.mark.parametrize(
    ("url", "meant"),
    [("me:s3cret@h:1", "redis://me:***@h:1"), ("http://me:s3cret@h:1/2", "redis://me:***@h:1/2"),
     ("/run/redis.sock", "unix:///run/redis.sock")],
)  # fmt: skip
def test_the_url_meant_is_suggested_without_the_password(url, meant):
    with pytest.raises(ConfigurationError) as refused:
        check_url(url)
    assert f"did you mean {meant!r}?" in str(refused.value)
    assert "s3cret" not in str(refused.value)
