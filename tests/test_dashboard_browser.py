"""The dashboard in a real headless Chromium, watching a real crawl: two ``scrapy crawl``
workers of example-project's myspider_redis crawl the local demo site while the page
is open. The page shows the numbers that are in Redis, and pushing a URL through its
form gets that URL crawled.

Set DASHBOARD_SCREENSHOT=path to keep a screenshot of the page (docs/_static/dashboard.png
is made so).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from scrapy.settings import Settings

from browser import chromium_driver
from dashboard_process import DashboardProcess, cookie_name
from scrapy_redis.fleet.status import crawl_status
from test_e2e import DOMAIN, PROBLEM, start_worker, wait_for_requests

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

SPIDER = "myspider_redis"
START_KEY = "myspider:start_urls"
#: A path no page of the 1000-page site links to (a 404): only a push gets it fetched.
PUSHED = "/p/1000.html"
#: Slow enough that the plots have a few points of a running crawl (for the screenshot:
#: no assertion depends on how far the crawl got when it is frozen).
WORKER_SETTINGS = {
    "STATS_CLASS": "scrapy_redis.stats.RedisStatsCollector",
    "DOWNLOAD_DELAY": 0.02,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 4,
}


@pytest.fixture
def browser(tmp_path):
    driver = chromium_driver(tmp_path / "profile", tmp_path / "chromedriver.log")
    yield driver
    driver.quit()


def project_status(server, redis_url):
    from example.spiders.myspider_redis import MySpider  # example-project is on sys.path

    settings = Settings()
    settings.setmodule("example.settings", priority="project")
    settings.set("REDIS_URL", redis_url, priority="cmdline")
    return crawl_status(server, settings, MySpider)


# The page replaces its elements at every refresh (--interval 0.5): an element found by
# one WebDriver call may be gone at the next ("stale element reference"), so what the
# page shows is read in one script call, in the page's own thread, between two refreshes.


def shown(browser, field: str) -> str:
    selector = f'[data-spider="{SPIDER}"] [data-field="{field}"]'
    text = browser.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
        selector,
    )
    return "" if text is None else str(text).strip()  # "": not on the page (yet)


def shown_workers(browser) -> set[str]:
    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), r => r.dataset.worker);",
        f'[data-spider="{SPIDER}"] tr[data-worker]',
    )
    return set(rows)


def wait(browser, condition, what, timeout: float = 15) -> None:
    """Wait until ``condition()``; fail saying ``what()`` otherwise."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(browser, timeout, poll_frequency=0.1).until(lambda _: condition())
    except TimeoutException:
        pytest.fail(f"the page did not show {what()} within {timeout}s")


def crawling(numbers: dict[str, str]) -> bool:
    """Whether both workers are alive and have counted 100 pages in the shared stats."""
    return numbers["workers_alive"] == "2" and int(numbers["pages"]) >= 100


def numbers_in(status) -> dict[str, str]:
    """The numbers the page shows for ``status``, as it writes them."""
    return {
        "queued": str(status.queued),
        "leased": str(status.leased),
        "pages": str(status.stats.get("response_received_count", 0)),
        "workers_alive": str(sum(1 for worker in status.workers if worker.alive)),
    }


def signal_all(workers, signum) -> None:
    for worker in workers:
        os.kill(worker.process.pid, signum)


def test_the_page_shows_a_running_crawl_and_its_push_form_feeds_it(
    site, server, redis_url, tmp_path, browser
):
    with ExitStack() as stack:
        dashboard = DashboardProcess(redis_url, "--interval", "0.5").start()
        stack.callback(dashboard.stop)
        workers = [
            start_worker(SPIDER, redis_url, tmp_path / f"worker-{n}.log", WORKER_SETTINGS, DOMAIN)
            for n in (1, 2)
        ]
        for worker in workers:
            stack.callback(worker.process.wait, 30)
            stack.callback(worker.process.terminate)
        browser.get(dashboard.url)
        server.rpush(START_KEY, site.url)
        wait_for_requests(site, 150, workers[0])
        in_redis = lambda: numbers_in(project_status(server, redis_url))  # noqa: E731
        wait_until(lambda: crawling(in_redis()), "two workers alive and 100 pages counted")
        time.sleep(2.5)  # a few points on the plots, for the screenshot

        # Freeze the crawl (SIGSTOP): what Redis holds stays put while the page catches up.
        # The page must show what Redis holds, read again at each try (a command a worker
        # sent just before the freeze may still land), whatever the crawl reached by then.
        signal_all(workers, signal.SIGSTOP)
        stack.callback(signal_all, workers, signal.SIGCONT)
        fields = ("queued", "leased", "pages", "workers_alive")
        numbers = lambda: {field: shown(browser, field) for field in fields}  # noqa: E731
        wait(
            browser, lambda: numbers() == in_redis(), lambda: f"{in_redis()} (it shows {numbers()})"
        )
        status = project_status(server, redis_url)
        assert crawling(numbers_in(status))  # frozen, not dead
        assert shown_workers(browser) == {worker.id for worker in status.workers}
        keep_screenshot(browser)
        signal_all(workers, signal.SIGCONT)

        push_through_the_form(browser, site.url + PUSHED.lstrip("/"))
        wait_until(lambda: PUSHED in site.snapshot(), f"{PUSHED} fetched")
        wait(
            browser, lambda: shown(browser, "start_pending") == "0", lambda: "no start message left"
        )
    for worker in workers:  # stopped (SIGTERM) by now
        log = worker.log_path.read_text(encoding="utf-8", errors="replace")
        assert not PROBLEM.search(log), worker.log_path


def push_through_the_form(browser, url: str) -> None:
    from selenium.webdriver.common.by import By

    form = browser.find_element(By.CSS_SELECTOR, f'[data-spider="{SPIDER}"] form.push')
    form.find_element(By.NAME, "messages").send_keys(url)
    form.find_element(By.CSS_SELECTOR, "button").click()
    result = f'[data-spider="{SPIDER}"] .action-result'
    expected = f"Pushed 1 message(s) to {START_KEY}."
    shown_result = lambda: browser.find_element(By.CSS_SELECTOR, result).text  # noqa: E731
    wait(
        browser,
        lambda: shown_result() == expected,
        lambda: f"{expected!r} (it shows {shown_result()!r})",
    )


def wait_until(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not {what} within {timeout}s"
        time.sleep(0.05)


def keep_screenshot(browser) -> None:
    path = os.environ.get("DASHBOARD_SCREENSHOT")
    if path:
        browser.set_window_size(1300, 860)
        browser.save_screenshot(path)


@pytest.fixture
def site():
    from demo_site import DemoSite  # example-project, on sys.path through test_e2e

    with DemoSite(pages=1000) as demo_site:
        yield demo_site


def test_purging_from_the_page_asks_first(server, redis_url, settings_dict, schedulers, browser):
    from scrapy import Request
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    scheduler = schedulers({**settings_dict, "SCHEDULER_QUEUE_KEY": "myspider_redis:requests"})
    for n in range(3):
        scheduler.enqueue_request(Request(f"http://example.com/{n}"))
    assert scheduler.send_enqueued()
    dashboard = DashboardProcess(redis_url, "--interval", "0.5").start()
    try:
        browser.get(dashboard.url)
        wait(browser, lambda: shown(browser, "queued") == "3", lambda: "3 queued")
        button = f'[data-spider="{SPIDER}"] form.purge button'
        # The scheduler is a live worker: the button and the question say so (the
        # server refuses a purge while workers are alive unless forced).
        assert browser.find_element(By.CSS_SELECTOR, button).text == (
            "Purge the queue (1 worker(s) alive)…"
        )
        browser.find_element(By.CSS_SELECTOR, button).click()
        WebDriverWait(browser, 5).until(expected_conditions.alert_is_present())
        assert "1 worker(s) of it are alive" in browser.switch_to.alert.text
        browser.switch_to.alert.dismiss()
        time.sleep(0.5)
        assert server.exists("myspider_redis:requests")  # not purged: the user said no
        browser.find_element(By.CSS_SELECTOR, button).click()
        WebDriverWait(browser, 5).until(expected_conditions.alert_is_present())
        browser.switch_to.alert.accept()
        wait(browser, lambda: shown(browser, "queued") == "0", lambda: "0 queued")
        assert not server.exists("myspider_redis:requests")
        result = browser.find_element(By.CSS_SELECTOR, f'[data-spider="{SPIDER}"] .action-result')
        assert result.text == f"Purged about 3 request(s) of {SPIDER}."
    finally:
        dashboard.stop()


#: Elements whose right edge passes the page's width at 420 px (none should).
CUT_OFF = """
const width = document.documentElement.clientWidth;
const cut = [...document.querySelectorAll("header *, .crawl, .crawl *")]
  .filter((e) => e.offsetParent !== null && !e.closest(".table-scroll table"))
  .filter((e) => e.getBoundingClientRect().right > width + 0.5)
  .map((e) => `${e.tagName.toLowerCase()}.${e.className} (${e.getBoundingClientRect().right} px)`);
return [width, document.documentElement.scrollWidth, cut];
"""

#: Counts the page's /api/status requests in flight (wraps its fetch).
COUNT_READS = """
const counts = window.statusReads = { inflight: 0, most: 0, started: 0 };
const original = window.fetch;
window.fetch = async (...args) => {
  const status = String(args[0]).includes("/api/status");
  if (status) {
    counts.inflight++;
    counts.started++;
    counts.most = Math.max(counts.most, counts.inflight);
  }
  try { return await original(...args); } finally { if (status) counts.inflight--; }
};
"""


def test_the_page_at_420_px_shows_everything_and_says_where_it_reads(
    server, redis_url, settings_dict, schedulers, browser, tmp_path
):
    from scrapy import Request
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    scheduler = schedulers({**settings_dict, "SCHEDULER_QUEUE_KEY": "myspider_redis:requests"})
    for n in range(3):
        scheduler.enqueue_request(Request(f"http://example.com/{n}"))
    assert scheduler.send_enqueued()
    server.rpush("mycrawler:start_urls", "http://example.com/")  # no worker: a diagnosis
    dashboard = DashboardProcess(redis_url, "--interval", "0.5").start()
    try:
        browser.set_window_size(420, 1400)
        browser.get(dashboard.url)
        wait(browser, lambda: shown(browser, "queued") == "3", lambda: "3 queued")
        find = lambda selector: browser.find_element(By.CSS_SELECTOR, selector)  # noqa: E731
        diagnosis = find('[data-spider="mycrawler_redis"] .diagnosis')
        wait(browser, diagnosis.is_displayed, lambda: "the diagnosis")
        assert "`" not in diagnosis.text
        assert diagnosis.find_element(By.TAG_NAME, "code").text == "scrapy crawl mycrawler_redis"
        assert find("#redis").text == redis_url  # redis://127.0.0.1:<port>/0
        assert re.search(r"\d+\.\d s old", find("#updated").text), find("#updated").text
        assert not find("#logout").is_displayed()  # no token: no session to end

        width, scroll_width, cut = browser.execute_script(CUT_OFF)
        screenshot = os.environ.get("DASHBOARD_NARROW_SCREENSHOT", tmp_path / "narrow.png")
        browser.save_screenshot(str(screenshot))  # to look at
        assert width <= 420
        assert cut == [], cut
        assert scroll_width <= width
        table = find(f'[data-spider="{SPIDER}"] .table-scroll')
        browser.execute_script("arguments[0].scrollLeft = 10000", table)
        last = find(f'[data-spider="{SPIDER}"] tr[data-worker] td:last-child')
        right = browser.execute_script("return arguments[0].getBoundingClientRect().right", last)
        assert right <= width  # the last worker column can be scrolled to

        push_through_the_form(browser, "http://example.com/pushed")
        find(f'[data-spider="{SPIDER}"] form.purge button').click()
        WebDriverWait(browser, 5).until(expected_conditions.alert_is_present())
        browser.switch_to.alert.dismiss()
        result = find(f'[data-spider="{SPIDER}"] .action-result')
        assert result.text == "Purge cancelled: nothing was deleted."
    finally:
        dashboard.stop()


def test_the_page_waits_for_its_read_before_the_next(server, redis_url, browser):
    dashboard = DashboardProcess(redis_url, "--interval", "0.2").start()
    try:
        from selenium.webdriver.common.by import By

        browser.get(dashboard.url)
        sections = lambda: browser.find_elements(By.CSS_SELECTOR, "[data-spider]")  # noqa: E731
        wait(browser, lambda: len(sections()) == 3, lambda: "the 3 spiders")
        browser.execute_script(COUNT_READS)
        server.execute_command("CLIENT", "PAUSE", "3000", "ALL")  # each read takes 3 s
        counts = lambda: browser.execute_script("return window.statusReads")  # noqa: E731
        wait(browser, lambda: counts()["started"] >= 3, lambda: f"3 reads ({counts()})", 30)
        assert counts()["most"] == 1, counts()
    finally:
        dashboard.stop()


class _Planting(BaseHTTPRequestHandler):
    """Another program of 127.0.0.1: its page sets cookies for the whole host."""

    cookies: tuple[str, ...] = ()

    def do_GET(self) -> None:
        self.send_response(200)
        for cookie in self.cookies:
            self.send_header("Set-Cookie", cookie)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(b"<p>planted</p>")

    def log_message(self, *args) -> None:
        pass


def test_a_login_survives_cookies_planted_from_another_port_and_logs_out(
    server, redis_url, browser
):
    from selenium.webdriver.common.by import By

    token = "correct-horse-battery-staple"
    dashboard = DashboardProcess(redis_url, "--token", token, "--interval", "0.5").start()
    name = cookie_name(dashboard.url)
    _Planting.cookies = (f"{name}=junk; Path=/api", "scrapy_redis_dashboard=junk; Path=/")
    planter = ThreadingHTTPServer(("127.0.0.1", 0), _Planting)
    threading.Thread(target=planter.serve_forever, daemon=True).start()
    try:
        browser.get(dashboard.url)  # to the login form
        browser.find_element(By.NAME, "token").send_keys(token)
        browser.find_element(By.CSS_SELECTOR, "form.login button").click()
        shows = lambda: f"the page (it shows {browser.page_source[300:600]!r})"  # noqa: E731
        wait(browser, lambda: browser.find_elements(By.ID, "logout"), shows)
        browser.get(f"http://127.0.0.1:{planter.server_port}/")
        assert {cookie["name"] for cookie in browser.get_cookies()} >= {name}
        browser.get(dashboard.url)
        form = f'[data-spider="{SPIDER}"] form.push'
        wait(browser, lambda: browser.find_elements(By.CSS_SELECTOR, form), lambda: "the form")
        push_through_the_form(browser, "http://example.com/after-planting")
        assert server.lrange(START_KEY, 0, -1) == [b"http://example.com/after-planting"]

        browser.find_element(By.ID, "logout").click()
        wait(browser, lambda: browser.current_url.endswith("/login"), lambda: "the login form")
        browser.get(dashboard.url)
        assert browser.current_url.endswith("/login")  # the session is over
    finally:
        planter.shutdown()
        planter.server_close()
        dashboard.stop()
