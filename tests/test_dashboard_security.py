"""The dashboard's guards against strangers: its Origin check behind a TLS reverse proxy,
the back-off after wrong tokens, and the shortest token it accepts beyond loopback.

Over HTTP against real ``python -m scrapy_redis.dashboard`` processes (each test that
fails tokens on purpose has its own: the back-off is per process and per address),
and the back-off's clock given directly to :class:`~scrapy_redis.dashboard.throttle.Throttle`.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dashboard_process import EXAMPLE, MODULE, DashboardProcess, csrf_token, http
from scrapy_redis.dashboard.security import MIN_TOKEN_LENGTH, TOKEN_ENV, check_binding
from scrapy_redis.dashboard.throttle import FAILURE_WINDOW, LOCKOUT, MAX_FAILURES, Throttle
from scrapy_redis.exceptions import ConfigurationError

pytestmark = pytest.mark.timeout(120)

TOKEN = "correct-horse-battery-staple"
START_KEY = "myspider:start_urls"  # myspider_redis's, in example-project
#: The name a TLS reverse proxy serves the dashboard under (it forwards this Host).
PUBLIC = "dashboard.example.test"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def token_dashboard(redis_url: str) -> DashboardProcess:
    return DashboardProcess(redis_url, "--host", "0.0.0.0", "--token", TOKEN, entry=MODULE)


@pytest.fixture(scope="module")
def proxied_dashboard(redis_server):
    """A dashboard with a token, reached as a TLS reverse proxy reaches it: over plain
    HTTP, with the public name in ``Host`` and the browser's ``https`` in ``Origin``."""
    dashboard = token_dashboard(redis_server.url).start()
    yield dashboard
    dashboard.stop()


@pytest.fixture
def fresh_dashboard(redis_url):
    """A dashboard with a token, for one test: no address has failed at it yet."""
    dashboard = token_dashboard(redis_url).start()
    yield dashboard
    dashboard.stop()


def log_in(url: str, headers: dict[str, str] | None = None, token: str = TOKEN):
    return http(url + "login", "POST", f"token={token}".encode(), {**FORM, **(headers or {})})


def session_of(login) -> dict[str, str]:
    """The ``Cookie`` header of the session a login set."""
    name = next(name for name in login.cookies if name.startswith("scrapy_redis_dashboard_"))
    return {"Cookie": f"{name}={login.cookies[name]}"}


def push(url: str, message: str, headers: dict[str, str]):
    """The push action of one start message for myspider_redis."""
    body = {"spider": "myspider_redis", "messages": [message]}
    return http(url + "api/actions/push", "POST", body, headers)


# -- the Origin behind a TLS reverse proxy -------------------------------------------------


@pytest.mark.parametrize("public", [PUBLIC, f"{PUBLIC}:8443"])
def test_behind_a_tls_proxy_the_login_and_actions_work(proxied_dashboard, server, public):
    """The browser is on https://<public>; the proxy forwards Host: <public> over http."""
    url = proxied_dashboard.url
    browser = {"Host": public, "Origin": f"https://{public}"}
    login = log_in(url, browser)
    assert login.status == 302, login.text
    assert "; Secure" in login.headers["Set-Cookie"]  # the browser is on https
    cookie = session_of(login)
    page = http(url, headers={"Host": public, **cookie})
    assert page.status == 200
    headers = {"X-CSRF-Token": csrf_token(page.text), **browser, **cookie}
    reply = push(url, f"https://{public}/a", headers)
    assert reply.status == 200, reply.text
    assert server.lrange(START_KEY, 0, -1) == [f"https://{public}/a".encode()]


@pytest.mark.parametrize(
    "origin",
    [
        "https://evil.test",
        f"https://{PUBLIC}.evil.test",
        f"https://{PUBLIC}:8443",  # another port of the same host: another site
        "null",  # a sandboxed frame, a page opened from a file
    ],
)
def test_an_origin_of_another_site_is_refused_as_such(proxied_dashboard, server, origin):
    url = proxied_dashboard.url
    login = log_in(url, {"Host": PUBLIC, "Origin": origin})
    assert login.status == 403
    assert "cross-origin request refused" in login.text
    assert "Wrong token" not in login.text  # the token was right
    assert "Set-Cookie" not in login.headers
    session = session_of(log_in(url, {"Host": PUBLIC, "Origin": f"https://{PUBLIC}"}))
    token = csrf_token(http(url, headers={"Host": PUBLIC, **session}).text)
    headers = {"Host": PUBLIC, "Origin": origin, "X-CSRF-Token": token, **session}
    reply = push(url, "http://a.test/", headers)
    assert reply.status == 403
    assert "cross-origin request refused" in reply.json()["error"]
    assert not server.exists(START_KEY)


def test_without_its_csrf_token_an_action_of_the_right_origin_is_refused(proxied_dashboard, server):
    url = proxied_dashboard.url
    browser = {"Host": PUBLIC, "Origin": f"https://{PUBLIC}"}
    reply = push(url, "http://a.test/", {**browser, **session_of(log_in(url, browser))})
    assert reply.status == 403
    assert "X-CSRF-Token" in reply.json()["error"]
    assert not server.exists(START_KEY)


# -- the back-off after wrong tokens ---------------------------------------------------------


def test_wrong_tokens_at_the_form_and_as_bearer_back_off_but_the_right_one_always_works(
    fresh_dashboard, server
):
    """A local user failing on purpose cannot lock Prometheus' (or anyone's) right token
    out: the back-off answers wrong tokens 429, and the right one is always accepted."""
    url = fresh_dashboard.url
    session = session_of(log_in(url))
    for _ in range(MAX_FAILURES - 1):
        assert log_in(url, token="wrong").status == 401
    basic = {"Authorization": "Basic dXNlcjpwYXNz", **session}  # a proxy's own login
    for _ in range(3):  # is no token attempt
        assert http(url + "api/status", headers=basic).status == 200
    refused = http(url + "api/status", headers={"Authorization": "Bearer wrong"})
    assert refused.status == 429  # the fifth wrong token
    assert 0 < int(refused.headers["Retry-After"]) <= LOCKOUT
    assert "try again in" in refused.json()["error"]
    wrong_login = log_in(url, token="wrong")
    assert wrong_login.status == 429
    assert "Too many wrong tokens" in wrong_login.text

    assert log_in(url).status == 302  # the right token, still accepted
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for _ in range(3):
        assert http(url + "metrics", headers=bearer).status == 200
        assert http(url + "api/status", headers={"Authorization": "Bearer wrong"}).status == 429
    assert http(url + "login").status == 200  # the form itself still shows
    assert http(url + "api/status", headers=session).status == 200  # sessions keep working


def test_five_wrong_tokens_within_the_window_lock_an_address_out_for_a_while():
    now = [1000.0]
    throttle = Throttle(clock=lambda: now[0])
    for _ in range(MAX_FAILURES - 1):
        throttle.failed("10.0.0.1")
        now[0] += 1
    assert throttle.retry_after("10.0.0.1") == 0
    throttle.failed("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") == LOCKOUT
    assert throttle.retry_after("10.0.0.2") == 0  # per address
    now[0] += LOCKOUT - 0.5
    assert throttle.retry_after("10.0.0.1") == 1
    now[0] += 0.5
    assert throttle.retry_after("10.0.0.1") == 0
    throttle.failed("10.0.0.1")  # a new count starts
    assert throttle.retry_after("10.0.0.1") == 0


def test_failures_further_apart_than_the_window_never_lock():
    now = [0.0]
    throttle = Throttle(clock=lambda: now[0])
    step = FAILURE_WINDOW / (MAX_FAILURES - 1)  # the first leaves the window at the last
    for _ in range(3 * MAX_FAILURES):
        throttle.failed("10.0.0.1")
        assert throttle.retry_after("10.0.0.1") == 0
        now[0] += step


def test_the_right_token_forgives_earlier_failures():
    now = [0.0]
    throttle = Throttle(clock=lambda: now[0])
    for _ in range(MAX_FAILURES - 1):
        throttle.failed("10.0.0.1")
    throttle.succeeded("10.0.0.1")
    for _ in range(MAX_FAILURES - 1):
        throttle.failed("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") == 0
    throttle.failed("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") == LOCKOUT


# -- the shortest token beyond loopback -----------------------------------------------------


def test_a_token_shorter_than_the_minimum_is_refused_beyond_loopback():
    short = "x" * (MIN_TOKEN_LENGTH - 1)
    with pytest.raises(ConfigurationError) as error:
        check_binding("0.0.0.0", short)
    message = str(error.value)
    assert "--token" in message
    assert TOKEN_ENV in message
    assert f"at least {MIN_TOKEN_LENGTH}" in message
    assert short not in message  # the token is not printed
    check_binding("0.0.0.0", "x" * MIN_TOKEN_LENGTH)
    check_binding("127.0.0.1", "short")  # on loopback a token is not even needed


@pytest.mark.parametrize("given", ["option", "environment"])
def test_the_dashboard_does_not_start_with_a_short_token(redis_url, given):
    command = [sys.executable, *MODULE, "--host", "0.0.0.0", "--port", "0"]
    env = {name: value for name, value in os.environ.items() if name != TOKEN_ENV}
    if given == "option":
        command += ["--token", "s3cret"]
    else:
        env[TOKEN_ENV] = "s3cret"
    result = subprocess.run(
        command, cwd=EXAMPLE, capture_output=True, text=True, timeout=60,
        env={**env, "REDIS_URL": redis_url},
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"at least {MIN_TOKEN_LENGTH}" in result.stderr
    assert "--token" in result.stderr
    assert TOKEN_ENV in result.stderr
    assert "Dashboard:" not in result.stdout
