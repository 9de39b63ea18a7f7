"""The dashboard under load and under attack: bodies capped before they are read, one
status read shared by every viewer, per-login sessions, the back-off over many
addresses, and the mistakes of its operator (a port taken, Redis down at start-up).

Over HTTP (and raw sockets) against real ``python -m scrapy_redis.dashboard`` processes;
the sessions' and back-off's clocks given directly to their classes.
"""

from __future__ import annotations

import http.client as http_client
import json
import re
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dashboard_process import EXAMPLE, MODULE, DashboardProcess, cookie_name, csrf_token, http
from redis_server import free_port
from scrapy_redis.dashboard.limits import ACTION_BODY_LIMIT, BODY_LIMIT
from scrapy_redis.dashboard.sessions import Sessions
from scrapy_redis.dashboard.throttle import GLOBAL_MAX_FAILURES, LOCKOUT, Throttle
from scrapy_redis.store.keys import lanes_key

pytestmark = pytest.mark.timeout(120)

TOKEN = "correct-horse-battery-staple"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
START_KEY = "myspider:start_urls"  # myspider_redis's, in example-project


@pytest.fixture
def local_dashboard(redis_url):
    dashboard = DashboardProcess(redis_url, "--interval", "0.01", entry=MODULE).start()
    yield dashboard
    dashboard.stop()


@pytest.fixture
def token_dashboard(redis_url):
    dashboard = DashboardProcess(
        redis_url, "--host", "0.0.0.0", "--token", TOKEN, "--interval", "0.01", entry=MODULE
    ).start()
    yield dashboard
    dashboard.stop()


def address(url: str) -> tuple[str, int]:
    host, port = url.split("//", 1)[1].rstrip("/").rsplit(":", 1)
    return host, int(port)


def rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmRSS:\s+(\d+) kB", status)
    assert match
    return int(match.group(1))


# -- bodies capped before they are read ------------------------------------------------------


def head(path: str, extra: str) -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode()


def read_answer(sock: socket.socket, timeout: float = 20) -> bytes:
    """What the dashboard answers, up to its closing the connection (or ``timeout``)."""
    sock.settimeout(timeout)
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return answer


@pytest.mark.parametrize(
    ("path", "limit", "read"),
    [("/login", BODY_LIMIT, 401), ("/api/actions/push", ACTION_BODY_LIMIT, 400)],
)
def test_a_body_announced_too_large_is_refused_before_it_is_sent(
    token_dashboard, server, path, limit, read
):
    """Content-Length: 300 MB, and not a byte of it sent: the answer comes at once."""
    bearer = f"Authorization: Bearer {TOKEN}\r\n" if path != "/login" else ""
    with socket.create_connection(address(token_dashboard.url)) as sock:
        announce = f"Content-Length: {300 * 1024 * 1024}\r\nExpect: 100-continue\r\n"
        sock.sendall(head(path, announce + bearer))
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert f"at most {limit} bytes".encode() in answer
    assert b"100 Continue" not in answer
    url = token_dashboard.url + path.lstrip("/")
    headers = {**FORM, **({"Authorization": f"Bearer {TOKEN}"} if bearer else {})}
    assert http(url, "POST", b"token=" + b"x" * (limit - 6), headers).status == read
    assert http(url, "POST", b"token=" + b"x" * (limit - 5), headers).status == 413


def test_only_an_authenticated_action_may_send_more_than_the_login_limit(token_dashboard, server):
    url = token_dashboard.url + "api/actions/push"
    body = {"spider": "myspider_redis", "messages": ["http://a.test/" + "x" * 8000]}
    assert http(url, "POST", body, {"Authorization": "Bearer wrong"}).status == 413
    assert http(url, "POST", body).status == 413
    reply = http(url, "POST", body, {"Authorization": f"Bearer {TOKEN}"})
    assert reply.status == 200, reply.text
    assert server.llen(START_KEY) == 1
    scrape = http(token_dashboard.url + "metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert "scrapy_redis_dashboard_token_failures_total 1\n" in scrape.text  # "wrong" counted


def test_a_body_nested_too_deep_is_a_bad_request(local_dashboard, server):
    headers = {"X-CSRF-Token": csrf_token(http(local_dashboard.url).text)}
    deep = b"[" * 200_000 + b"]" * 200_000  # within the action limit
    reply = http(local_dashboard.url + "api/actions/push", "POST", deep, headers)
    assert reply.status == 400, reply.text
    assert reply.json() == {"error": "the body must be a JSON object"}
    assert "Traceback" not in "".join(local_dashboard.output)


def test_a_chunked_body_is_refused_once_past_the_limit_and_never_read_whole(
    local_dashboard, server
):
    """A chunked POST that would send 200 MB: the dashboard answers 413 once the action
    limit is passed and stops reading; its memory does not grow with what was sent."""
    pid = local_dashboard.process.pid
    before = rss_kb(pid)
    total, sent, stop = 200 * 1024 * 1024, [0], threading.Event()
    chunk = b"%x\r\n%s\r\n" % (65536, b"a" * 65536)

    with socket.create_connection(address(local_dashboard.url)) as sock:
        sock.sendall(head("/api/actions/push", "Transfer-Encoding: chunked\r\n"))

        def send() -> None:
            sock.settimeout(5)
            try:
                while sent[0] < total and not stop.is_set():
                    sock.sendall(chunk)
                    sent[0] += 65536
            except OSError:  # refused, or the dashboard stopped reading (a timeout)
                pass

        sender = threading.Thread(target=send)
        sender.start()
        try:
            answer = read_answer(sock)
        finally:
            stop.set()
            sender.join(30)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert sent[0] < total / 4, f"{sent[0]} bytes sent: the dashboard read on"
    assert rss_kb(pid) - before < 40 * 1024, "the dashboard's memory grew with the body"
    assert http(local_dashboard.url + "api/status").status == 200  # still serving


# -- one status read, shared ---------------------------------------------------------------


def reads_total(metrics_text: str) -> int:
    match = re.search(r"^scrapy_redis_dashboard_status_reads_total (\d+)$", metrics_text, re.M)
    assert match, metrics_text
    return int(match.group(1))


def test_concurrent_viewers_and_metrics_share_one_status_read(local_dashboard, server):
    """Redis is paused (CLIENT PAUSE): the read in flight waits, and every request that
    comes meanwhile, /api/status or /metrics, is answered by that same read."""
    url = local_dashboard.url
    first = http(url + "api/status").json()["read"]["number"]
    time.sleep(0.05)  # that read is now older than --interval: the next request reads again
    server.execute_command("CLIENT", "PAUSE", "3000", "ALL")
    with ThreadPoolExecutor(9) as pool:
        statuses = [pool.submit(http, url + "api/status") for _ in range(6)]
        scrapes = [pool.submit(http, url + "metrics") for _ in range(3)]
        reads = [future.result().json()["read"] for future in statuses]
        totals = [reads_total(future.result().text) for future in scrapes]
    assert {read["number"] for read in reads} == {first + 1}, reads
    assert set(totals) == {first + 1}
    assert all(read["took"] >= 1 for read in reads), reads  # it waited for Redis
    assert all(0 <= read["age"] < 60 for read in reads), reads
    assert "scrapy_redis_dashboard_status_age_seconds " in scrapes[0].result().text


def test_an_action_is_followed_by_a_fresh_read(redis_url, server):
    """A read serves everyone for --interval (here 60 s), but not past an action."""
    dashboard = DashboardProcess(redis_url, "--interval", "60", entry=MODULE).start()
    try:
        url = dashboard.url
        assert http(url + "api/status").status == 200
        token = csrf_token(http(url).text)
        body = {"spider": "myspider_redis", "messages": ["http://a.test/"]}
        assert http(url + "api/actions/push", "POST", body, {"X-CSRF-Token": token}).status == 200
        crawls = http(url + "api/status").json()["crawls"]
        assert next(c for c in crawls if c["spider"] == "myspider_redis")["start_pending"] == 1
    finally:
        dashboard.stop()


def test_a_value_in_redis_the_dashboard_cannot_use_is_an_answer_never_a_500(
    local_dashboard, server
):
    """A lanes record that is not a number (the status of every crawl may report it as
    unreadable, or the read fail): the dashboard answers, saying so, never 500."""
    server.set(lanes_key("myspider_redis:requests", False), "3x")
    status = http(local_dashboard.url + "api/status")
    assert status.status in (200, 503), status.text
    if status.status == 503:
        assert "3x" in status.json()["error"]
    metrics = http(local_dashboard.url + "metrics")
    assert metrics.status == 200
    headers = {"X-CSRF-Token": csrf_token(http(local_dashboard.url).text)}
    body = {"spider": "myspider_redis", "messages": ["http://a.test/"]}
    push = http(local_dashboard.url + "api/actions/push", "POST", body, headers)
    assert push.status != 500, push.text
    assert "Traceback" not in "".join(local_dashboard.output)


# -- sessions --------------------------------------------------------------------------------


def log_in(url: str, token: str = TOKEN):
    return http(url + "login", "POST", f"token={token}".encode(), FORM)


def cookie_of(url: str, login) -> str:
    return login.cookies[cookie_name(url)]


def test_each_login_has_its_own_session_and_csrf_token_and_a_logout_ends_it(
    token_dashboard, server
):
    url = token_dashboard.url
    name = cookie_name(url)
    first, second = cookie_of(url, log_in(url)), cookie_of(url, log_in(url))
    assert first != second
    assert f"Max-Age={12 * 3600}" in log_in(url).headers["Set-Cookie"]
    tokens = {
        session: csrf_token(http(url, headers={"Cookie": f"{name}={session}"}).text)
        for session in (first, second)
    }
    assert tokens[first] != tokens[second]
    push = url + "api/actions/push"
    body = {"spider": "myspider_redis", "messages": ["http://a.test/"]}
    crossed = {"Cookie": f"{name}={first}", "X-CSRF-Token": tokens[second]}
    assert http(push, "POST", body, crossed).status == 403  # the token of another session
    own = {"Cookie": f"{name}={first}", "X-CSRF-Token": tokens[first]}
    assert http(push, "POST", body, own).status == 200

    assert http(url + "logout", "POST", b"", {"Cookie": f"{name}={first}"}).status == 403
    logout = http(url + "logout", "POST", b"", own)
    assert logout.status == 200, logout.text
    assert "Max-Age=0" in logout.headers["Set-Cookie"]
    assert http(url + "api/status", headers={"Cookie": f"{name}={first}"}).status == 401
    assert http(push, "POST", body, own).status == 401
    assert http(url + "api/status", headers={"Cookie": f"{name}={second}"}).status == 200


def test_a_session_expires():
    now = [0.0]
    sessions = Sessions(lifetime=100, clock=lambda: now[0])
    session = sessions.open()
    now[0] = 99.0
    assert sessions.valid(session)
    now[0] = 100.0
    assert not sessions.valid(session)
    assert not sessions.valid("made-up")


def test_the_number_of_sessions_is_bounded():
    sessions = Sessions(limit=3)
    opened = [sessions.open() for _ in range(5)]
    assert [sessions.valid(session) for session in opened] == [False, False, True, True, True]


def test_cookies_planted_from_another_port_do_not_break_the_pages_actions(
    local_dashboard, token_dashboard, server
):
    """Cookies are not isolated by port: a page on 127.0.0.1:<another port> can set
    cookies the browser then sends to the dashboard too (the old name, the dashboard's
    own name with a narrower Path, which the browser sends first)."""
    body = {"spider": "myspider_redis", "messages": ["http://a.test/"]}
    # Without a token: the page was loaded before the cookies were planted.
    url = local_dashboard.url
    token = csrf_token(http(url).text)
    planted = f"{cookie_name(url)}=junk; scrapy_redis_dashboard=junk"
    reply = http(url + "api/actions/push", "POST", body, {"X-CSRF-Token": token, "Cookie": planted})
    assert reply.status == 200, reply.text
    # With a token: the session cookie next to a planted one of the same name.
    url = token_dashboard.url
    name, session = cookie_name(url), cookie_of(url, log_in(url))
    token = csrf_token(http(url, headers={"Cookie": f"{name}={session}"}).text)
    for cookies in (f"{name}=junk; {name}={session}", f"{name}={session}; {name}=junk"):
        headers = {"X-CSRF-Token": token, "Cookie": f"scrapy_redis_dashboard=junk; {cookies}"}
        reply = http(url + "api/actions/push", "POST", body, headers)
        assert reply.status == 200, (cookies, reply.text)
    assert server.llen(START_KEY) == 3


# -- the back-off over many addresses --------------------------------------------------------


def status_from(url: str, source: str, token: str) -> int:
    """GET /api/status from the local address ``source`` with a bearer ``token``."""
    host, port = address(url)
    connection = http_client.HTTPConnection(host, port, timeout=30, source_address=(source, 0))
    try:
        connection.request("GET", "/api/status", headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_wrong_tokens_from_addresses_rotated_through_127_0_0_0_8_are_throttled(
    token_dashboard, server
):
    url = token_dashboard.url
    answers = [
        status_from(url, f"127.0.{n // 250}.{n % 250 + 2}", "wrong")
        for n in range(GLOBAL_MAX_FAILURES + 3)
    ]
    assert set(answers[: GLOBAL_MAX_FAILURES - 1]) == {401}
    assert set(answers[GLOBAL_MAX_FAILURES - 1 :]) == {429}
    assert status_from(url, "127.0.9.9", "still wrong") == 429  # a new address too
    for source in ("127.0.0.1", "127.0.0.2", "127.0.9.10"):  # the right token, anywhere
        assert status_from(url, source, TOKEN) == 200
    failures = re.search(
        r"^scrapy_redis_dashboard_token_failures_total (\d+)$",
        http(url + "metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text,
        re.M,
    )
    assert failures and int(failures.group(1)) == GLOBAL_MAX_FAILURES + 4


def test_the_global_back_off_and_ipv6_prefixes():
    now = [0.0]
    throttle = Throttle(limit=5, global_limit=8, clock=lambda: now[0])
    for n in range(4):  # one /64: one address for the back-off
        throttle.failed(f"2001:db8::{n + 1}")
    assert throttle.retry_after("2001:db8::ffff") == 0
    throttle.failed("2001:db8::9")
    assert throttle.retry_after("2001:db8::ffff") == LOCKOUT
    assert throttle.retry_after("2001:db8:0:1::1") == 0  # another /64
    for n in range(3):
        throttle.failed(f"10.0.0.{n}")
    assert throttle.retry_after("192.0.2.1") == LOCKOUT  # 8 in all
    now[0] += LOCKOUT
    assert throttle.retry_after("192.0.2.1") == 0


# -- the operator's mistakes -----------------------------------------------------------------


def test_a_port_already_taken_is_one_line(redis_url, server):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, *MODULE, "--port", str(port)],
            cwd=EXAMPLE, capture_output=True, text=True, timeout=60,
            env={**DashboardProcess(redis_url).env},
        )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in lines[0]
    assert "--port" in lines[0]


def test_redis_unreachable_is_said_at_start_and_answered_not_failed():
    port = free_port()  # nothing listens there
    redis_url = f"redis://:s3cret-pw@127.0.0.1:{port}/3"
    dashboard = DashboardProcess(redis_url, entry=MODULE).start()
    try:
        said = "".join(dashboard.output)
        assert f"warning: Redis at redis://:***@127.0.0.1:{port}/3 is unreachable" in said
        assert f"(Redis: redis://:***@127.0.0.1:{port}/3)" in said
        status = http(dashboard.url + "api/status")
        assert status.status == 503
        assert f"127.0.0.1:{port}/3" in status.json()["error"]
        metrics = http(dashboard.url + "metrics")
        assert metrics.status == 200
        assert "scrapy_redis_dashboard_status_ok 0" in metrics.text
        page = http(dashboard.url)
        assert f"127.0.0.1:{port}/3" in page.text
        for text in (said, status.text, metrics.text, page.text):
            assert "s3cret-pw" not in text
    finally:
        dashboard.stop()
    assert "Traceback" not in "".join(dashboard.output)


def test_with_json_the_verb_prints_its_address_and_redis_as_json(redis_url):
    command = [sys.executable, "-m", "scrapy", "redis", "dashboard", "--json", "--port", "0"]
    env = DashboardProcess(redis_url).env
    process = subprocess.Popen(command, cwd=EXAMPLE, env=env, text=True, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
    finally:
        process.terminate()
        process.wait(30)
        assert process.stdout is not None
        process.stdout.close()
    document = json.loads(line)
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", document["url"]), document
    assert document["redis"] == redis_url
