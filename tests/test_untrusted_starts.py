"""Start messages are untrusted: anyone who can write to the start key (or use the
dashboard) picks what the workers fetch. Only the URL schemes REDIS_START_URLS_SCHEMES
allows are fetched, a message longer than REDIS_START_URLS_MAX_SIZE is set aside before
it is decoded, and a misspelt key is refused by ``push`` and reported by the spiders.
``push`` (the command, the dashboard, operations.push_messages) runs one check."""

from __future__ import annotations

import json
import logging

import pytest
from scrapy import FormRequest
from scrapy.settings import Settings

from scrapy_redis.dashboard.fleet import ActionError, Fleet
from scrapy_redis.exceptions import InvalidStartMessageError
from scrapy_redis.fleet.operations import MessageCheck, push_messages
from test_commands import write_project
from test_spiders import MySpider, make, urls

KEY = "myspider:start_urls"


def push(server, *messages: str) -> None:
    server.rpush(KEY, *messages)


def test_a_start_url_of_a_scheme_not_allowed_is_set_aside_with_the_reason(
    settings_dict, server, caplog
):
    spider = make(settings_dict)
    push(server, "file:///etc/passwd", "https://example.com/ok", '{"url": "data:,secret"}')
    with caplog.at_level(logging.WARNING, "scrapy_redis.spiders"):
        assert urls(spider.next_requests()) == ["https://example.com/ok"]
    stats = spider.crawler.stats
    assert stats.get_value("redis/start_messages/invalid") == 2
    assert stats.get_value("redis/start_messages/read") == 3
    skipped = [r.getMessage() for r in caplog.records if "Skipping start message" in r.message]
    assert len(skipped) == 2
    assert "URL scheme 'file' not allowed" in skipped[0]
    assert "REDIS_START_URLS_SCHEMES allows http, https" in skipped[0]
    assert "URL scheme 'data' not allowed" in skipped[1]
    assert server.llen(KEY) == 0  # popped, not put back: set aside
    # kept for `scrapy redis export SPIDER invalid` and `requeue --invalid`, leases released
    set_aside = server.lrange(f"{KEY}:invalid", 0, -1)
    assert set_aside == [b"file:///etc/passwd", b'{"url": "data:,secret"}']
    assert server.hlen(f"{KEY}:leases") == 1  # the valid one's, until its requests are scheduled
    spider.next_requests()  # acknowledges it
    assert server.hlen(f"{KEY}:leases") == 0


class OwnReader(MySpider):
    """Builds its URLs itself (a path, not a URL, in each message)."""

    def make_request_from_data(self, data):
        return FormRequest(f"file://{data.decode()}")


def test_the_schemes_are_checked_on_the_requests_of_a_spiders_own_reader(settings_dict, server):
    spider = make(settings_dict, OwnReader)
    push(server, "/etc/passwd")
    assert spider.next_requests() == []
    assert spider.crawler.stats.get_value("redis/start_messages/invalid") == 1


def test_the_setting_allows_more_schemes(settings_dict, server):
    spider = make({**settings_dict, "REDIS_START_URLS_SCHEMES": ["http", "https", "ftp"]})
    push(server, "ftp://example.com/a", "file:///etc/passwd")
    assert urls(spider.next_requests()) == ["ftp://example.com/a"]


class CountingReader(MySpider):
    decoded = 0

    def make_request_from_data(self, data):
        CountingReader.decoded += 1
        return super().make_request_from_data(data)


def test_a_message_over_the_size_limit_is_set_aside_before_it_is_decoded(
    settings_dict, server, caplog
):
    spider = make({**settings_dict, "REDIS_START_URLS_MAX_SIZE": 100}, CountingReader)
    big = json.dumps({"url": "https://example.com/big", "meta": {"x": "a" * 200}})
    push(server, big, "https://example.com/small")
    with caplog.at_level(logging.WARNING, "scrapy_redis.spiders"):
        assert urls(spider.next_requests()) == ["https://example.com/small"]
    assert CountingReader.decoded == 1  # the small one only
    assert spider.crawler.stats.get_value("redis/start_messages/invalid") == 1
    assert "over REDIS_START_URLS_MAX_SIZE (100)" in caplog.text
    assert len(caplog.text) < 2000  # the message is not logged whole


def test_unknown_keys_are_form_data_as_in_the_original_but_warned_once_and_counted(
    settings_dict, server, caplog
):
    spider = make(settings_dict)
    message = json.dumps({"url": "https://example.com/a", "calback": "parse_item"})
    push(server, message, message)
    with caplog.at_level(logging.WARNING, "scrapy_redis.spiders"):
        requests = spider.next_requests()
    assert urls(requests) == ["https://example.com/a?calback=parse_item"] * 2
    assert spider.crawler.stats.get_value("redis/start_messages/unknown_keys") == 2
    warnings = [r for r in caplog.records if "unknown key" in r.message]
    assert len(warnings) == 1
    assert "'calback'" in warnings[0].getMessage()


class WithStartUrls(MySpider):
    start_urls = ["https://example.com/never"]


class ReadsStartUrls(WithStartUrls):
    def start_requests(self):  # pragma: no cover - never run here
        yield from super().start_requests()


@pytest.mark.parametrize(("spidercls", "warned"), [(WithStartUrls, True), (MySpider, False),
                                                   (ReadsStartUrls, False)])  # fmt: skip
def test_start_urls_that_a_redis_spider_ignores_are_warned_about(
    settings_dict, server, caplog, spidercls, warned
):
    with caplog.at_level(logging.WARNING, "scrapy_redis.spiders"):
        make(settings_dict, spidercls)
    found = [r.getMessage() for r in caplog.records if "start_urls" in r.message]
    assert bool(found) is warned
    if warned:
        assert "WithStartUrls.start_urls (1 URLs) is ignored" in found[0]
        assert f"from Redis ({KEY})" in found[0]


def test_the_start_log_names_the_server_and_database_without_the_password(
    redis_server, server, caplog
):
    server.acl_setuser("starter", enabled=True, passwords=["+s3cret"], keys=["~*"],
                       channels=["*"], commands=["+@all"])  # fmt: skip
    try:
        url = redis_server.url.replace("redis://", "redis://starter:s3cret@")
        with caplog.at_level(logging.INFO, "scrapy_redis.spiders"):
            make({"REDIS_URL": url})
    finally:
        server.acl_deluser("starter")
    (line,) = [r.getMessage() for r in caplog.records if "Reading start URLs" in r.message]
    host_port = redis_server.url.split("://", 1)[1].rsplit("/", 1)[0]
    assert f"at redis://starter:***@{host_port}/0 " in line
    assert "s3cret" not in caplog.text


# -- push: the command, the dashboard, operations.push_messages -------------------------


def test_push_messages_checks_every_message_before_pushing_any(server):
    with pytest.raises(InvalidStartMessageError, match="scheme 'file' not allowed"):
        push_messages(server, KEY, "list", ["https://example.com/", "file:///etc/passwd"])
    with pytest.raises(InvalidStartMessageError, match="over REDIS_START_URLS_MAX_SIZE"):
        push_messages(server, KEY, "list", ["https://example.com/" + "a" * 2_000_000])
    assert not server.exists(KEY)
    check = MessageCheck(allow_unknown_keys=True)
    assert push_messages(server, KEY, "list", ['{"url": "https://a.test/", "x": "1"}'], check=check)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("not a url", "not a URL"),
        ("file:///etc/passwd", "scheme 'file' not allowed"),
        ('{"url": "https://a.test/", "calback": "parse"}', "unknown key 'calback'"),
        ("https://a.test/" + "a" * 1_100_000, "over REDIS_START_URLS_MAX_SIZE"),
    ],
)
def test_the_dashboards_push_refuses_what_the_command_refuses(
    settings_dict, server, message, reason
):
    fleet = Fleet(server, Settings(settings_dict), [MySpider])
    with pytest.raises(ActionError, match=reason):
        fleet.push("myspider", {"messages": ["https://a.test/ok", message]})
    assert not server.exists(KEY)
    assert fleet.push("myspider", {"messages": ["https://a.test/ok"]})["pushed"] == 1


def test_the_dashboards_push_follows_the_spiders_settings(settings_dict, server):
    settings = Settings({**settings_dict, "REDIS_START_URLS_SCHEMES": ["ftp"]})
    fleet = Fleet(server, settings, [MySpider])
    assert fleet.push("myspider", {"messages": ["ftp://a.test/"]})["pushed"] == 1
    with pytest.raises(ActionError, match="scheme 'https' not allowed"):
        fleet.push("myspider", {"messages": ["https://a.test/"]})


def test_the_push_command_refuses_bad_messages_in_one_line_each(tmp_path, redis_url, server):
    project = write_project(tmp_path, redis_url)
    typo = '{"url": "https://a.test/", "calback": "parse_item"}'
    big = "https://a.test/" + "a" * 1_100_000
    refused = project.run("push", "demo", "file:///etc/passwd", typo, "https://a.test/ok", "-",
                          stdin=big + "\n")  # fmt: skip
    assert refused.returncode == 1
    lines = refused.stderr.splitlines()
    assert len(lines) == 4, refused.stderr
    assert lines[0].startswith("invalid: file:///etc/passwd: URL scheme 'file' not allowed")
    assert "unknown key 'calback'" in lines[1] and "--force" in lines[1]
    assert "over REDIS_START_URLS_MAX_SIZE" in lines[2] and len(lines[2]) < 500
    assert lines[3].startswith("Nothing pushed: 3 messages refused")
    assert not server.exists("demo:start_urls")

    forced = project.run("push", "demo", typo, "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["pushed"] == 1
    assert server.lrange("demo:start_urls", 0, -1) == [typo.encode()]
    still = project.run("push", "demo", "file:///etc/passwd", "--force")
    assert still.returncode == 1 and "scheme 'file' not allowed" in still.stderr
